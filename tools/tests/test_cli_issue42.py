"""The command's defects from the third campaign (issue 42, items 7, 13 and 14), one test each, named
after the defect; docs/reliability.md lists them. Each tripped before its fix."""
import re
import resource
import shutil
import struct
import subprocess
import zlib

import pytest

from conftest import MPI_ENV, assert_one_line_error, binary, run_cli

TINY_MODEL = ["--d-model", 16, "--heads", 2, "--layers", 1, "--mlp-hidden", 32, "--batch", 2, "--seq-len", 12,
              "--eval-batches", 1, "--threads", 1]
TINY_TRAIN = [*TINY_MODEL, "--warmup", 1]
BENCH = ["bench", "--batch", 1, "--heads", 1, "--dim", 4]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A 2-step run's checkpoint (bytes) and the number of weights it holds."""
    folder = tmp_path_factory.mktemp("ckpt")
    proc = run_cli("train", "--steps", 2, "--out", folder / "m.model", *TINY_TRAIN)
    assert proc.returncode == 0, proc.stderr
    data = (folder / "m.model.ckpt").read_bytes()
    count = int(proc.stdout.split(" parameters;")[0].rsplit(" ", 1)[1])
    return data, count


def with_float(data, offset, value):
    """data with the f32 at offset replaced and the trailing CRC-32 recomputed."""
    body = data[:offset] + struct.pack("<f", value) + data[offset + 4:-4]
    return body + struct.pack("<I", zlib.crc32(body))


@pytest.mark.parametrize("field,index,value,message", [
    ("v", 0, -1.0, "AdamW second moments[0] is -1, expected a finite number ≥ 0"),
    ("v", 7, float("inf"), "AdamW second moments[7] is inf"),
    ("m", 3, float("nan"), "AdamW first moments[3] is nan"),
])
def test_defect42_07_checkpoint_with_negative_or_non_finite_moments_is_refused(tmp_path, checkpoint, field, index,
                                                                              value, message):
    # The checkpoint ends with the first moments, the second moments (count floats each) and the CRC.
    data, count = checkpoint
    start = len(data) - 4 - (2 if field == "m" else 1) * 4 * count
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(with_float(data, start + 4 * index, value))
    line = assert_one_line_error(run_cli("train", "--resume", bad, "--steps", 3, "--out", tmp_path / "o.model"), 1)
    assert f"{bad}: {message}" in line, line
    assert not (tmp_path / "o.model").exists()


def test_defect42_07_train_stops_on_a_non_finite_loss_keeping_the_last_good_checkpoint(tmp_path):
    # lr 1000 without clipping diverges within a few steps; the run exited 0 with a NaN model.
    model = tmp_path / "m.model"
    proc = run_cli("train", "--steps", 200, "--lr", 1000, "--clip", 0, "--warmup", 0, "--checkpoint-every", 1,
                   "--out", model, *TINY_MODEL)
    line = assert_one_line_error(proc, 1)
    assert "the loss at step " in line and "training diverged" in line, line
    step = int(line.split("the loss at step ")[1].split(" ")[0])
    assert f"the last good checkpoint, {model}.ckpt (step {step - 1}), is kept" in line, line
    assert not model.exists()
    # The checkpoint kept loads (finite weights and moments) and holds the step before the bad one.
    resumed = run_cli("train", "--resume", f"{model}.ckpt", "--steps", step - 1, "--out", model)
    assert resumed.returncode == 0, resumed.stderr
    assert f"resumed at step {step - 1})" in resumed.stdout


def test_defect42_14_out_naming_the_checkpoint_is_refused(tmp_path):
    model = tmp_path / "m.model"
    line = assert_one_line_error(run_cli("train", "--steps", 1, "--out", model, "--checkpoint",
                                         tmp_path / "sub" / ".." / "m.model", *TINY_TRAIN), 2)
    assert "--out" in line and "--checkpoint" in line and "are one file" in line, line
    assert not model.exists()
    proc = run_cli("train", "--steps", 2, "--out", model, *TINY_TRAIN)
    assert proc.returncode == 0, proc.stderr
    ckpt = tmp_path / "m.model.ckpt"
    state = ckpt.read_bytes()
    (tmp_path / "link.ckpt").symlink_to(ckpt)
    for out in [ckpt, tmp_path / "link.ckpt", tmp_path / "sub" / ".." / "m.model.ckpt"]:
        line = assert_one_line_error(run_cli("train", "--resume", ckpt, "--steps", 3, "--out", out), 2)
        assert "--resume" in line and "are one file" in line, line
    line = assert_one_line_error(run_cli("train", "--resume", ckpt, "--steps", 3, "--out", model, "--csv",
                                         tmp_path / "link.ckpt"), 2)
    assert "--csv" in line and "are one file" in line, line
    assert ckpt.read_bytes() == state  # the training state survives every refusal
    # generate's speed table written over the model it reads: the same refusal.
    weights = model.read_bytes()
    line = assert_one_line_error(run_cli("generate", "--model", model, "--speed-contexts", 4, "--speed-csv",
                                         tmp_path / "sub" / ".." / "m.model"), 2)
    assert "--speed-csv" in line and "--model" in line and "are one file" in line, line
    assert model.read_bytes() == weights


@pytest.mark.parametrize("args,message", [
    ([*BENCH, "--op", "causal", "--seq", "0x10"], "--seq: is '0x10', expected an integer in [1, 1073741824] in plain"),
    (["bench", "--op", "causal", "--batch", 1, "--heads", 1, "--seq", 8, "--dim", "010"], "--dim: is '010'"),
    ([*BENCH, "--op", "causal", "--seq", " 16"], "--seq: is ' 16'"),
    ([*BENCH, "--op", "causal", "--seq", "16 "], "--seq: is '16 '"),
    ([*BENCH, "--op", "causal", "--seq", "+16"], "--seq: is '+16'"),
    ([*BENCH, "--op", "causal", "--seq", "1e3"], "--seq: is '1e3'"),
    (["train", "--lr", " 0.5"], "--lr: is ' 0.5'"),
    (["train", "--steps", "010"], "--steps: is '010'"),
    ([*BENCH, "--op", "causal", "--seq", 8, "--seed", -1], "--seed: is -1, expected an integer in [0, 18446744073709551615]"),
    (["train", "--seed", 1 << 64], "--seed: is 18446744073709551616"),
    (["train", "--init-seed", -5], "--init-seed: is -5"),
    (["generate", "--model", "m", "--seed", "0x1"], "--seed: is '0x1'"),
    (["compare", "--seed", -1], "--seed: is -1"),
    (["accuracy", "--seed", -1], "--seed: is -1"),
    (["run", "--q", "q", "--k", "k", "--v", "v", "--out", "o", "--seed", -1], "--seed: is -1"),
    (["compare", "--methods", "gla,,gla"], "--methods: 'gla,,gla' has an empty element"),
    (["compare", "--seq", "16,"], "--seq: '16,' has an empty element"),
    (["accuracy", "--sizes", ",8"], "--sizes: ',8' has an empty element"),
    (["generate", "--model", "m", "--speed-contexts", "4,,8"], "--speed-contexts: '4,,8' has an empty element"),
    (["run", "--q", "q", "--k", "k", "--v", "v", "--out", "o", "--key-lengths", "1,,2"], "has an empty element"),
    (["compare", "--methods", "gla,flash"], "--methods: is 'flash', expected one of"),
    (["train", "--lr", 0.001, "--min-lr", 1], "--min-lr is 1, greater than --lr 0.001"),
    ([*BENCH, "--op", "gla", "--seq", 8, "--features", 4], "--features applies to --op performer"),
    ([*BENCH, "--op", "kda", "--seq", 8, "--features", 4], "--op kda has no random features"),
    ([*BENCH, "--op", "delta_rule", "--seq", 8, "--projected", 4], "--projected applies to --op linformer"),
    ([*BENCH, "--op", "retention", "--seq", 8, "--projected", 4], "--op retention projects nothing"),
    (["train", "--attention", "flash"], "--attention: is 'flash', expected one of"),
])
def test_defect42_13_flags_take_plain_decimal_whole_lists_and_only_what_applies(args, message):
    line = assert_one_line_error(run_cli(*args), 2)
    assert message in line, line


def test_defect42_13_flag_names_are_taken_in_any_case(tmp_path):
    # --attention GLA passed the flag check, then failed in the model (exit 1).
    proc = run_cli("train", "--attention", "GLA", "--task", "COPY", "--steps", 1, "--out", tmp_path / "m.model",
                   *TINY_TRAIN)
    assert proc.returncode == 0, proc.stderr
    assert "task copy, attention gla," in proc.stdout
    proc = run_cli("compare", "--methods", "Causal,GLA", "--seq", "16,32", "--seq", 64, "--heads", 1, "--dim", 8,
                   "--budget", 0, "--min-reps", 1, "--out", tmp_path / "cmp")
    assert proc.returncode == 0, proc.stderr
    assert "gla " in proc.stdout and "N = 16 " in proc.stdout and "N = 64 " in proc.stdout


def _mpi_train(tmp_path, rank0, rank1):
    """`mpirun` with one rank running `linattn train --seq-parallel RANK0...` and one `... RANK1...`
    (MPMD); skips where mpirun is missing or linattn was built without MPI."""
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.skip("mpirun not found")
    command = [mpirun, "--oversubscribe", "-np", "1", binary(), "train", "--seq-parallel", *map(str, rank0), ":",
               "-np", "1", binary(), "train", "--seq-parallel", *map(str, rank1)]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=MPI_ENV, cwd=tmp_path)
    if "built without MPI" in proc.stderr:
        pytest.skip("linattn built without linattn_mpi")
    return proc


@pytest.mark.parametrize("flag,rank0,rank1,name", [
    ("--seq-len", 12, 16, "training option seq_len"),
    ("--lr", 0.001, 0.002, "training option lr"),
    ("--d-model", 16, 8, "model setting d_model"),
])
def test_defect42_06_seq_parallel_ranks_disagreeing_on_options_end_the_job(tmp_path, flag, rank0, rank1, name):
    # Ranks with another --seq-len or --lr trained and exited 0.
    pairs = [TINY_TRAIN[i:i + 2] for i in range(0, len(TINY_TRAIN), 2)]
    common = ["--steps", 2, "--out", "m.model", *(x for pair in pairs if pair[0] != flag for x in pair)]
    proc = _mpi_train(tmp_path, [*common, flag, rank0], [*common, flag, rank1])
    assert proc.returncode != 0, (proc.stdout, proc.stderr)
    assert f"rank 1's {name} differs from rank 0's" in proc.stderr, proc.stderr
    assert not (tmp_path / "m.model").exists()


def test_defect42_06_seq_parallel_ranks_disagreeing_on_data_or_checkpoint_end_the_job(tmp_path, checkpoint):
    text = "the same letters in another order\n" * 40  # the same vocabulary: only the contents differ
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "b.txt").write_text(text[::-1])
    text = ["--task", "text", "--steps", 2, "--out", "m.model", *TINY_TRAIN]
    proc = _mpi_train(tmp_path, [*text, "--data", "a.txt"], [*text, "--data", "b.txt"])
    assert proc.returncode != 0 and "rank 1's data file differs from rank 0's" in proc.stderr, proc.stderr
    # The same options, another first moment: a checkpoint that differs in its state alone.
    data, count = checkpoint
    (tmp_path / "a.ckpt").write_bytes(data)
    (tmp_path / "b.ckpt").write_bytes(with_float(data, len(data) - 4 - 8 * count, 0.5))
    resume = ["--steps", 3, "--out", "m.model", "--threads", 1]
    proc = _mpi_train(tmp_path, ["--resume", "a.ckpt", *resume], ["--resume", "b.ckpt", *resume])
    assert proc.returncode != 0 and "rank 1's checkpoint state (weights, AdamW moments, step) differs" in proc.stderr, \
        proc.stderr
    assert not (tmp_path / "m.model").exists()


def test_defect42_09_train_refuses_a_run_larger_than_memory_before_allocating(tmp_path, checkpoint):
    # A checkpoint with batch 65536 (x 16 tokens: inside every bound) allocated until memory ran out;
    # `train` had no estimate. Under a 1 GiB address-space limit (RLIMIT_AS, one of the bounds the
    # estimate is checked against, with MemAvailable and the memory cgroup's limit) it is refused.
    data, _ = checkpoint
    start = data.index(b"batch=2\n")
    (length,) = struct.unpack("<q", data[start - 8:start])
    text = data[start:start + length].replace(b"batch=2\n", b"batch=65536\n").replace(b"seq_len=12\n", b"seq_len=16\n")
    body = data[:start - 8] + struct.pack("<q", len(text)) + text + data[start + length:-4]
    big = tmp_path / "big.ckpt"
    big.write_bytes(body + struct.pack("<I", zlib.crc32(body)))
    limit = 1 << 30
    proc = subprocess.run([binary(), "train", "--resume", str(big), "--steps", "3", "--out", str(tmp_path / "o.model"),
                           "--threads", "1"], capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    line = assert_one_line_error(proc, 3)
    assert "batch 65536 x 16 tokens) needs about" in line and "(RLIMIT_AS less the address space in use)" in line, line
    # Flags asking for more than the machine has are refused before the weights are allocated.
    line = assert_one_line_error(run_cli("train", "--batch", 65536, "--seq-len", 16, "--d-model", 4096, "--layers", 64,
                                         "--heads", 8, "--mlp-hidden", 65536, "--out", tmp_path / "m.model"), 3)
    assert "needs about" in line and "refusing to start" in line, line


REQUIRED = {"bench": {"--op": "causal", "--batch": 1, "--heads": 1, "--seq": 8, "--dim": 4},
            "run": {"--q": "q.npy", "--k": "k.npy", "--v": "v.npy", "--out": "o.npy"},
            "generate": {"--model": "m.model"}}


def number_flags(command):
    """The flags `linattn COMMAND --help` lists with a number type (INT, UINT, FLOAT)."""
    proc = run_cli(command, "--help")
    assert proc.returncode == 0, proc.stderr
    return [m.group(1) for m in (re.match(r"\s+(--[a-z-]+) (INT|UINT|FLOAT)\b", line)
                                 for line in proc.stdout.splitlines()) if m]


@pytest.mark.parametrize("command", ["bench", "compare", "run", "train", "generate", "accuracy", "explain"])
def test_defect42_13_every_number_flag_takes_plain_decimal_only(command):
    # A sweep over every number flag --help lists, so that a flag added later keeps the rule: CLI11
    # alone read 010 as 8 and 0x10 as 16, and took " 16" but not "16 ".
    flags = number_flags(command)
    assert flags, command
    for flag in flags:
        for spelling in ["010", "0x10", " 1", "1 "]:
            args = {**REQUIRED.get(command, {}), flag: spelling}
            line = assert_one_line_error(run_cli(command, *(x for pair in args.items() for x in pair)), 2)
            assert f"{flag}: is '{spelling}'" in line and "plain decimal" in line, (flag, line)


def test_defect42_15_prompt_outside_the_vocabulary_names_the_flag_and_the_model(tmp_path):
    # The tokenizer's error named neither the flag nor the file whose vocabulary it checked against.
    model = tmp_path / "copy.model"
    proc = run_cli("train", "--task", "copy", "--steps", 1, "--out", model, *TINY_TRAIN)
    assert proc.returncode == 0, proc.stderr
    line = assert_one_line_error(run_cli("generate", "--model", model, "--prompt", "abz", "--tokens", 2), 2)
    assert "--prompt" in line and str(model) in line and "'z'" in line and "offset 2" in line, line
