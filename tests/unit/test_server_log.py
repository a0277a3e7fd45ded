from orchestrator.verdicts.server_log import argparse_error, find_fatal


def test_nan_assertion_is_fatal():
    lines = ["[TP0] Decode batch, #running-req: 64",
             "/pytorch/aten/src/ATen/native/cuda/MultinomialKernel.cu: Assertion "
             "`probability tensor contains either `inf`, `nan` or element < 0` failed."]
    hit = find_fatal(lines)
    assert hit is not None and hit.code == "nan"
    assert "probability tensor" in hit.line


def test_unsupported_architecture_is_fatal():
    hit = find_fatal(["RuntimeError: TllmGenFmhaRunner: Unsupported architecture"])
    assert hit is not None and hit.code == "unsupported-arch"
    assert "SM120" in hit.meaning


def test_ordinary_lines_are_not_fatal():
    assert find_fatal(["Load weight end. mem usage=57.06 GB", "The server is fired up and ready to roll!"]) is None


def test_argparse_error_is_found():
    line = "sglang serve: error: unrecognized arguments: --no-such-flag 1"
    assert argparse_error(["usage: sglang serve [-h]", line]) == line
    assert argparse_error(["all good"]) is None
