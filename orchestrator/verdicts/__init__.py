"""Pure verdicts: policy over parsed facts (P2P, host prerequisites). No I/O; results serialise with to_dict()."""
