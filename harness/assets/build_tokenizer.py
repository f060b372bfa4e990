"""Build the shipped byte-level BPE tokenizer, deterministically and offline.

    python harness/assets/build_tokenizer.py [--out DIR]   (default: harness/assets/tokenizer)

The 256-byte alphabet gets ``BPE_VOCAB_SIZE - 256`` merges trained on a corpus enumerated (no
randomness) from the synthetic task templates, the format demonstrations and the geo3k-style
instruction, so frequent pieces (``\\boxed{``, `` red``, ``Answer``) are single tokens. The Qwen chat /
vision special tokens and ``<think>``/``</think>`` are appended after the BPE vocabulary.
Pre-tokenisation is Qwen2's split regex (plus one alternative keeping ``\\word{`` together) followed
by byte-level mapping, as in Qwen's own tokenizer.json.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
from pathlib import Path

BPE_VOCAB_SIZE = 491  # 256 bytes + 235 merges
SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
)
THINK_TOKENS = ("<think>", "</think>")
VOCAB_SIZE = BPE_VOCAB_SIZE + len(SPECIAL_TOKENS) + len(THINK_TOKENS)  # 500

SPLIT_PATTERN = (
    r" ?\\[a-z]+\{|(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

INSTRUCTION = "Think step by step inside <think></think>, then give the final answer in \\boxed{}."
VERL_INSTRUCTION = (
    "You FIRST think about the reasoning process as an internal monologue and then provide the final "
    "answer. The reasoning process MUST BE enclosed within <think> </think> tags. The final answer MUST "
    "BE put in \\boxed{}."
)
COLORS = ("red", "green", "blue", "yellow")
LETTERS = ("A", "B", "C", "D")
QUESTIONS = (
    "What colour fills the image? Choices: A. red B. green C. blue D. yellow",
    "How many shapes are in the image? Answer with a number from 1 to 4.",
    "Which bar is longer? Choices: A. the top bar B. the bottom bar",
    "Which digit is drawn in the image? Answer with a single digit.",
)
THOUGHTS = (
    "the image is mostly one colour",
    "I count the shapes",
    "I compare the two bars",
    "I read the digit",
    "I find the option with that word",
    "I add the two numbers",
    "I look at the problem",
)
GEOMETRY = (
    "Find x.",
    "Find y.",
    "Find the measure of the angle.",
    "Find the area of the triangle. Round to the nearest tenth.",
    "Find the perimeter of the figure. Round to the nearest hundredth.",
    "In the circle, find the length of the arc.",
)


ADDED_SPLIT = "|".join(re.escape(t) for t in SPECIAL_TOKENS + THINK_TOKENS)


def corpus() -> list[str]:
    """The training pieces, enumerated in a fixed order."""
    lines: list[str] = []
    for q in QUESTIONS:
        lines += [f"{q}\n{INSTRUCTION}"] * 24
    for target in COLORS:
        for order in itertools.permutations(COLORS):
            opts = " ".join(f"{LETTERS[i]}. {w}" for i, w in enumerate(order))
            lines.append(f"Which option is the word {target}? {opts}\n{INSTRUCTION}")
    for a, b in itertools.product(range(5), repeat=2):
        lines.append(f"What is {a} + {b}? Answer with a number.\n{INSTRUCTION}")
    answers = LETTERS + tuple(str(d) for d in range(10))
    for thought, ans in itertools.product(THOUGHTS, answers):
        lines += [f"<think>{thought}</think>\\boxed{{{ans}}}"] * 6
        lines.append(f"Answer: {ans}")
    for g in GEOMETRY:
        lines += [f"{g} {VERL_INSTRUCTION}"] * 4
    lines += ["user\n", "assistant\n", "system\n"] * 64
    # added tokens are cut out before pre-tokenisation at encode time: train on the pieces between them
    return [piece for line in lines for piece in re.split(ADDED_SPLIT, line) if piece]


def build(out_dir: str | os.PathLike[str]) -> Path:
    """Train and write ``tokenizer.json`` + ``tokenizer_config.json`` into ``out_dir``."""
    os.environ.setdefault("RAYON_NUM_THREADS", "1")
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )

    tok = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=BPE_VOCAB_SIZE,
        min_frequency=2,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=[],
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    if tok.get_vocab_size() != BPE_VOCAB_SIZE:
        raise RuntimeError(f"BPE vocab is {tok.get_vocab_size()}, expected {BPE_VOCAB_SIZE}")
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    if tok.get_vocab_size() != VOCAB_SIZE:
        raise RuntimeError(f"vocab is {tok.get_vocab_size()}, expected {VOCAB_SIZE}")

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tokenizer.json").write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 32768,
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "add_prefix_space": False,
        "split_special_tokens": False,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return out / "tokenizer.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent / "tokenizer"))
    args = parser.parse_args()
    print(build(args.out))


if __name__ == "__main__":
    main()
