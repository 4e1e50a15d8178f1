"""Hand labels of G and y at every boundary: a labelling page in the browser, nothing lost, agreement built in.

The reference study annotated G_i (externalization gap) and y (future
necessity) by hand at every compression boundary. ``interp annotate`` serves a
page for that on 127.0.0.1 (:mod:`interp.annotation.server`), one label per
key press or button click, with the written guideline on the page
(:mod:`interp.annotation.guideline`):

- an item opens at its boundary: the question, what 0 and 1 mean, the step
  new at b highlighted; a G item shows the history up to b only (system
  prompt, tools, task, steps 1..b), never a later step; a y item adds the
  steps b+1..n (:mod:`interp.annotation.views`);
- optionally (off by default, recorded with each label) the rule labelers'
  evidence: the items the G labeler found only in reasoning and where it
  looked; the rule that fired for y and its step;
- every label is journaled and fsynced the moment it is given, the CSV is
  rewritten atomically from the journal, a restart resumes, a second server on
  the same output is refused, a label given on a trajectory that has changed
  since is set aside and named (:mod:`interp.annotation.session`);
- two annotators: ``interp labels agree A.csv B.csv``
  (:func:`interp.data.labels.pair_agreement`) and ``interp annotate
  --adjudicate A.csv --adjudicate B.csv`` walks only their disagreements.

Model-assisted labels: ``interp labels judge`` (:mod:`interp.annotation.judge`)
asks an OpenAI-compatible chat model for G and y with the guideline as its
rubric; ``interp labels agree`` measures it against people and ``interp labels
status`` shows who labelled what.

In a notebook: :func:`interp.annotation.server.start_annotation` and
:func:`interp.annotation.notebook.annotation_iframe` (``interp.start_annotation``,
``interp.annotation_iframe``).
"""
