#!/usr/bin/env python3
"""Keyword-spotting data for `linattn train --task speech` (issue 41), synthesised on this machine.

A dozen keywords plus "unknown" (other words), spoken by Debian's synthesizers (espeak-ng with several
voices and variants, and flite's built-in voices when flite is installed), each utterance through sox
(resampled to --rate, mono, leading and trailing silence trimmed), then placed at a random offset in a
fixed window of --length samples, scaled by a random gain, mixed with white noise at a random SNR and
quantised to 8-bit mu-law tokens (vocabulary 256). Nothing is downloaded.

Speakers are held out: a speaker is one synthesizer voice (espeak-ng voice+variant, or a flite voice).
Each synthesizer's speakers are shuffled by --seed and dealt to the splits (about 70% train, 15%
validation, 15% test), so the test split is spoken by voices that training never heard. Example i of a
split is a function of (--seed, split, i) alone: a seed gives the same file, byte for byte.

The file is written with scripts/applications/dataset_file.py's write_dataset (docs/datasets.md).

  scripts/applications/make_speech_data.py --out speech.ds
  scripts/applications/make_speech_data.py --out tiny.ds --keywords yes,no --train 8 --eval 4 --length 2000
  scripts/applications/make_speech_data.py --out speech8k.ds --rate 8000 --length 8000 --jobs 2
"""
import argparse
import multiprocessing
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from dataset_file import write_dataset  # noqa: E402  (H4's writer, beside this script)

KEYWORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go", "zero", "one")
# The "unknown" class: words that are none of the keywords (Speech Commands' auxiliary words and a few more).
UNKNOWN_WORDS = ("bed", "bird", "cat", "dog", "happy", "house", "tree", "wow", "marvin", "sheila", "learn",
                 "follow", "forward", "backward", "visual", "seven", "eight", "nine", "two", "three")
UNKNOWN = "unknown"
ESPEAK_VOICES = ("en-us", "en-gb", "en-gb-scotland", "en-gb-x-rp", "en-029", "en-gb-x-gbclan", "en-gb-x-gbcwmd")
ESPEAK_VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5")
FLITE_VOICES = ("kal", "kal16", "awb", "rms", "slt")
SNRS_DB = (None, 20.0, 10.0, 5.0)  # None: no added noise
SPLITS = ("train", "validation", "test")
MU = 255


def speakers(synthesizers):
    """{synthesizer: [voice, ...]} for the synthesizers asked for."""
    table = {"espeak-ng": [f"{v}+{x}" for v in ESPEAK_VOICES for x in ESPEAK_VARIANTS], "flite": list(FLITE_VOICES)}
    return {s: table[s] for s in synthesizers}


def held_out_speakers(by_synth, seed):
    """{split: [(synthesizer, voice), ...]}: each synthesizer's voices shuffled by seed, 15% to the test
    split, 15% to validation (at least one each where a synthesizer has three voices), the rest to train."""
    out = {s: [] for s in SPLITS}
    for index, (synth, voices) in enumerate(sorted(by_synth.items())):
        order = np.random.default_rng([seed, 7919, index]).permutation(len(voices))
        held = max(1, round(0.15 * len(voices))) if len(voices) >= 3 else 0
        for rank, v in enumerate(order):
            split = "test" if rank < held else "validation" if rank < 2 * held else "train"
            out[split].append((synth, voices[v]))
    for split, chosen in out.items():
        if not chosen:
            raise SystemExit(f"make_speech_data: no voice left for the {split} split: use more synthesizers")
    return out


def synthesize(synth, voice, word, rng, rate, workdir):
    """One utterance as float32 samples in [-1, 1] at `rate`, silence trimmed; speed and pitch drawn
    from rng (espeak-ng's own -s/-p; flite's duration stretch and a sox pitch shift)."""
    wav = pathlib.Path(workdir) / "word.wav"
    effects = []
    if synth == "espeak-ng":
        speed, pitch = int(rng.integers(130, 211)), int(rng.integers(20, 81))
        command = ["espeak-ng", "-v", voice, "-s", str(speed), "-p", str(pitch), "-w", str(wav), word]
    else:
        stretch, cents = rng.uniform(0.8, 1.25), int(rng.integers(-300, 301))
        command = ["flite", "-voice", voice, "--setf", f"duration_stretch={stretch:.3f}", "-t", word, "-o", str(wav)]
        effects = ["pitch", str(cents)]
    subprocess.run(command, check=True, capture_output=True)
    # Float output: sox adds no dither, so the samples are a function of the arguments alone.
    trim = ["silence", "1", "0.01", "0.5%", "reverse", "silence", "1", "0.01", "0.5%", "reverse"]
    raw = subprocess.run(["sox", str(wav), "-t", "raw", "-e", "floating-point", "-b", "32", "-c", "1", "-", *effects,
                          "rate", str(rate), *trim], check=True, capture_output=True).stdout
    samples = np.frombuffer(raw, dtype=np.float32).astype(np.float64)
    if samples.size == 0:
        raise RuntimeError(f"{synth} voice {voice} gave silence for {word!r}")
    return samples


def mu_law(x):
    """8-bit mu-law tokens (0..255) of samples in [-1, 1] (ITU G.711's curve, mu = 255)."""
    y = np.sign(x) * np.log1p(MU * np.abs(x)) / np.log1p(MU)
    return np.clip(np.round((y + 1) / 2 * MU), 0, MU).astype(np.uint8)


def place(word, rng, length):
    """The utterance at a random offset in a window of `length` samples (a random crop if longer), at a
    random peak gain of -12..0 dB, with white noise at an SNR from SNRS_DB (relative to the word's power)."""
    word = word / max(np.abs(word).max(), 1e-9) * 10 ** (rng.uniform(-12, 0) / 20)
    window = np.zeros(length)
    if word.size <= length:
        start = int(rng.integers(0, length - word.size + 1))
        window[start:start + word.size] = word
    else:
        start = int(rng.integers(0, word.size - length + 1))
        window[:] = word[start:start + length]
    snr = SNRS_DB[int(rng.integers(len(SNRS_DB)))]
    if snr is not None:
        power = np.mean(word**2)
        window += rng.normal(0.0, np.sqrt(power / 10 ** (snr / 10)), length)
    return mu_law(np.clip(window, -1.0, 1.0))


def example(job):
    """(tokens, label) of example `index` of a split: a function of (seed, split, index) alone."""
    seed, split_index, index, classes, unknown_words, voices, rate, length = job
    rng = np.random.default_rng([seed, split_index, index])
    label = index % len(classes)
    word = classes[label] if classes[label] != UNKNOWN else unknown_words[int(rng.integers(len(unknown_words)))]
    synth, voice = voices[int(rng.integers(len(voices)))]
    with tempfile.TemporaryDirectory(prefix="linattn-speech-") as workdir:
        samples = synthesize(synth, voice, word, rng, rate, workdir)
    return place(samples, rng, length), label


def positive(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def word_list(text):
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    if not words or not all(w.replace("'", "").isalpha() for w in words):
        raise argparse.ArgumentTypeError(f"expected comma-separated words of letters, got {text!r}")
    return words


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="examples:\n" + __doc__.rsplit("\n\n", 1)[1],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", required=True, help="the dataset file to write (docs/datasets.md)")
    parser.add_argument("--keywords", type=word_list, default=list(KEYWORDS),
                        help="comma-separated keywords (default: %(default)s)")
    parser.add_argument("--unknown-words", type=word_list, default=list(UNKNOWN_WORDS),
                        help="words of the 'unknown' class (none of them a keyword)")
    parser.add_argument("--no-unknown", action="store_true", help="leave the 'unknown' class out")
    parser.add_argument("--train", type=positive, default=300, help="training examples per class (default 300)")
    parser.add_argument("--eval", type=positive, default=50,
                        help="validation and test examples per class, each (default 50)")
    parser.add_argument("--rate", type=positive, default=4000, help="sample rate in Hz (default 4000)")
    parser.add_argument("--length", type=positive, default=4000,
                        help="samples (tokens) per example (default 4000: one second at 4 kHz)")
    parser.add_argument("--synthesizers", default="espeak-ng,flite",
                        help="espeak-ng and/or flite, comma-separated; flite is skipped with a note if absent")
    parser.add_argument("--seed", type=int, default=1, help="fixes the voices' split and every example (default 1)")
    parser.add_argument("--jobs", type=positive, default=1, help="processes synthesising at once (default 1)")
    args = parser.parse_args(argv)
    if args.rate < 1000:
        parser.error(f"--rate {args.rate}: speech needs at least 1000 Hz (4000 or 8000 are meant)")
    clash = sorted(set(args.unknown_words) & set(args.keywords))
    if clash:
        parser.error(f"--unknown-words has keywords in it ({', '.join(clash)}): an unknown word must not be a keyword")
    if len(set(args.keywords)) != len(args.keywords):
        parser.error(f"--keywords repeats a word: {','.join(args.keywords)}")
    wanted = [s.strip() for s in args.synthesizers.split(",") if s.strip()]
    bad = [s for s in wanted if s not in ("espeak-ng", "flite")]
    if bad or not wanted:
        parser.error(f"--synthesizers {args.synthesizers!r}: expected espeak-ng and/or flite")
    args.synthesizers = wanted
    return args


def available(wanted):
    """The synthesizers of `wanted` that are installed; sox and espeak-ng are required."""
    for tool in ("sox", *(["espeak-ng"] if "espeak-ng" in wanted else [])):
        if shutil.which(tool) is None:
            raise SystemExit(f"make_speech_data: {tool} not found: install it (scripts/setup.sh installs espeak-ng, "
                             "flite and sox)")
    found = [s for s in wanted if shutil.which(s)]
    for s in sorted(set(wanted) - set(found)):
        print(f"make_speech_data: {s} not installed: using {', '.join(found)} only", file=sys.stderr)
    if not found:
        raise SystemExit("make_speech_data: no synthesizer installed: install espeak-ng (scripts/setup.sh)")
    return found


def main(argv=None):
    args = parse(argv)
    classes = list(args.keywords) + ([] if args.no_unknown else [UNKNOWN])
    voices = held_out_speakers(speakers(available(args.synthesizers)), args.seed)
    print(f"make_speech_data: {len(voices['train'])} training voices; held out for validation: "
          f"{', '.join(f'{s}:{v}' for s, v in voices['validation'])}; for test: "
          f"{', '.join(f'{s}:{v}' for s, v in voices['test'])}", file=sys.stderr)
    sizes = {"train": args.train * len(classes), "validation": args.eval * len(classes),
             "test": args.eval * len(classes)}
    total, done, start = sum(sizes.values()), 0, time.monotonic()
    splits = {}
    with multiprocessing.Pool(args.jobs) as pool:
        for split_index, split in enumerate(SPLITS):
            jobs = [(args.seed, split_index, i, classes, list(args.unknown_words), voices[split], args.rate, args.length)
                    for i in range(sizes[split])]
            tokens = np.empty((sizes[split], args.length), dtype=np.uint8)
            labels = np.empty(sizes[split], dtype=np.int64)
            for i, (row, label) in enumerate(pool.imap(example, jobs, chunksize=8)):
                tokens[i], labels[i] = row, label
                done += 1
                if done % max(1, total // 20) == 0 or done == total:
                    print(f"make_speech_data: {done}/{total} examples ({100 * done / total:.0f}%), "
                          f"{time.monotonic() - start:.0f} s", file=sys.stderr, flush=True)
            splits[split] = (tokens, labels)
    write_dataset(args.out, "speech", splits, MU + 1, classes)
    print(f"make_speech_data: wrote {args.out}: {len(classes)} classes, {total} examples of {args.length} tokens "
          f"({args.length / args.rate:.2f} s at {args.rate} Hz)", file=sys.stderr)


if __name__ == "__main__":
    main()
