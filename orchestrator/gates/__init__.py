"""Gates that catch what /health and a regex smoke check miss (issue 22): the correctness gate lives here."""
