"""What a history policy costs and saves in tokens: request-level accounting with a prefix cache (no model forward)."""
