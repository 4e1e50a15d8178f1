"""The headless browser of the labelling page's browser tests (one fixture for every module that drives it)."""

import shutil

import pytest

from tests.annotation._support import chromium_or_skip


@pytest.fixture()
def browser():
    """A headless Chromium (or skip saying what is missing); its profile folder is removed after the test."""
    driver, profile = chromium_or_skip()
    yield driver
    driver.quit()
    shutil.rmtree(profile, ignore_errors=True)
