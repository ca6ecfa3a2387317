"""`linattn compare --methods` with the delta rule (issue 41: deltanet, gated_deltanet, kda) and the
default set, one method of each family."""
import json

from conftest import run_cli

TINY = ["--seq", "32,64", "--heads", 1, "--dim", 8, "--budget", 0, "--min-reps", 1, "--threads", 1, "--no-plot"]


def test_delta_rule_methods(tmp_path):
    proc = run_cli("compare", *TINY, "--methods", "softmax,deltanet,gated_deltanet,kda", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["config"]["methods"] == ["softmax", "deltanet", "gated_deltanet", "kda"]
    assert set(doc["fits"]) == {"softmax", "deltanet", "gated_deltanet", "kda"}
    for r in doc["results"]:
        assert r["forward_seconds"]["median"] > 0 and r["forward_backward_seconds"]["median"] > 0
        if r["method"] != "softmax":
            # the delta rule is causal and another function than softmax: compared with causal softmax
            assert r["error_reference"] == "causal softmax" and r["relative_error"] > 0
            assert r["backward_flops"] > 0
    for name in ["deltanet", "gated_deltanet", "kda"]:
        assert f"\n{name} " in proc.stdout or f"{name} " in proc.stdout


def test_bench_names_are_aliases(tmp_path):
    """The operator table's names, delta_rule and gated_delta_rule, still work, printed as compare's."""
    proc = run_cli("compare", *TINY, "--methods", "delta_rule,gated_delta_rule,GATED_DELTANET", "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads((tmp_path / "compare.json").read_text())["config"]["methods"] == ["deltanet", "gated_deltanet"]


def test_unknown_method_names_the_choices(tmp_path):
    proc = run_cli("compare", *TINY, "--methods", "softmax,deltanett", "--out", tmp_path)
    assert proc.returncode == 2 and "deltanett" in proc.stderr and "gated_deltanet" in proc.stderr


def test_default_is_one_of_each_family(tmp_path):
    proc = run_cli("compare", *TINY, "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads((tmp_path / "compare.json").read_text())
    assert doc["config"]["methods"] == ["softmax", "linear", "performer", "linformer", "gla", "gated_deltanet"]
    assert len(doc["results"]) == 2 * 6
