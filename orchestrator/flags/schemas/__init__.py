"""Packaged sglang flag schemas (argparse dumps), one JSON file per release: sglang-<version>.json."""
