"""`linattn info`: the CPU's features, the Highway targets and the dispatch choice, as text and JSON."""

import json

from conftest import run_cli


def test_info_json_names_the_dispatched_target():
    proc = run_cli("info", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert set(info) >= {"version", "architecture", "model", "features", "compiled_targets", "supported_targets",
                         "dispatched_target", "threads"}
    assert info["dispatched_target"] in info["supported_targets"]
    assert set(info["supported_targets"]) <= set(info["compiled_targets"])
    assert all(isinstance(v, bool) for v in info["features"].values())
    if info["architecture"] == "x86_64":
        assert {"avx2", "fma", "f16c", "avx512f", "avx512_bf16", "avx512_fp16", "avx_vnni"} <= set(info["features"])
        # Highway picks AVX3 only where AVX-512 F/BW/DQ/VL are all present (and AVX2 needs AVX2 + FMA).
        f = info["features"]
        if "AVX3" in info["supported_targets"]:
            assert f["avx512f"] and f["avx512bw"] and f["avx512dq"] and f["avx512vl"]
        if "AVX2" in info["supported_targets"]:
            assert f["avx2"] and f["fma"]
    assert info["threads"] >= 1


def test_info_text_says_what_dispatch_chose():
    proc = run_cli("info")
    assert proc.returncode == 0, proc.stderr
    chosen = json.loads(run_cli("info", "--json").stdout)["dispatched_target"]
    assert f"dispatch chose:    {chosen}" in proc.stdout
    assert "targets compiled:" in proc.stdout and "features present:" in proc.stdout
