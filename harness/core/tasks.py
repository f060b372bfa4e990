"""Synthetic tasks: a seeded generator per task makes (image, question, checkable answer) examples.

Each task is ``fn(rng: numpy.random.Generator, image_size: int) -> Example`` and is registered with
:func:`register_task` together with its answer choices (used by format-only demonstrations) and a
short neutral thought. Vision tasks draw with Pillow; text tasks have no image.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from harness.registry import Registry

INSTRUCTION = "Think step by step inside <think></think>, then give the final answer in \\boxed{}."
SYNTHETIC_PREFIX = "synthetic/"
LETTERS = ("A", "B", "C", "D")
COLOR_NAMES = ("red", "green", "blue", "yellow")
COLOR_RGB = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (40, 70, 220), "yellow": (230, 210, 40)}
GENERIC_CHOICES = tuple(str(d) for d in range(10))


@dataclasses.dataclass(frozen=True)
class Example:
    """One prompt: ``question`` has no vision placeholders (the chat template adds the vision block)."""

    uid: str
    data_source: str
    question: str
    answer: str
    images: tuple[Image.Image, ...] = ()


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    name: str
    fn: Callable[[np.random.Generator, int], Example]
    choices: tuple[str, ...]
    thought: str
    vision: bool


_TASKS: Registry[TaskSpec] = Registry("synthetic task", key_path="data.synthetic.tasks")


def register_task(
    name: str, *, choices: tuple[str, ...] | list[str], thought: str, vision: bool
) -> Callable[[Callable[[np.random.Generator, int], Example]], Callable[[np.random.Generator, int], Example]]:
    """Decorator registering a synthetic task generator under ``name`` (duplicates are a ValueError)."""

    def deco(fn: Callable[[np.random.Generator, int], Example]) -> Callable[[np.random.Generator, int], Example]:
        _TASKS.register(name)(TaskSpec(name, fn, tuple(choices), thought, vision))
        return fn

    return deco


def task_names() -> list[str]:
    return list(_TASKS.names())


def get_task(name: str) -> TaskSpec:
    return _TASKS.lookup(name)


def task_of(example: Example) -> str | None:
    """The synthetic task an example came from, or None for loaded data."""
    if example.data_source.startswith(SYNTHETIC_PREFIX):
        name = example.data_source[len(SYNTHETIC_PREFIX) :]
        if name in _TASKS:
            return name
    return None


def answer_choices(task_or_example: str | Example) -> list[str]:
    """Valid answers of a task (or of the task an example came from); digits for non-synthetic data."""
    if isinstance(task_or_example, Example):
        name = task_of(task_or_example)
        return list(GENERIC_CHOICES) if name is None else list(_TASKS[name].choices)
    return list(get_task(task_or_example).choices)


def demo_response(example: Example, rng: np.random.Generator) -> str:
    """A format-only demonstration: a neutral thought and a RANDOM valid choice (not the answer)."""
    name = task_of(example)
    thought = _TASKS[name].thought if name is not None else "I look at the problem"
    choices = answer_choices(example)
    pick = choices[int(rng.integers(len(choices)))]
    return f"<think>{thought}</think>\\boxed{{{pick}}}"


def _question(body: str) -> str:
    return f"{body}\n{INSTRUCTION}"


def _example(task: str, body: str, answer: str, images: tuple[Image.Image, ...] = ()) -> Example:
    return Example(uid="", data_source=SYNTHETIC_PREFIX + task, question=_question(body), answer=answer, images=images)


def _noisy(base: np.ndarray, rng: np.random.Generator, amplitude: int) -> Image.Image:
    noise = rng.integers(-amplitude, amplitude + 1, size=base.shape)
    return Image.fromarray(np.clip(base.astype(np.int16) + noise, 0, 255).astype(np.uint8), mode="RGB")


def _canvas(size: int) -> Image.Image:
    return Image.new("RGB", (size, size), (245, 245, 245))


# --------------------------------------------------------------------------- vision tasks
COLOR_BODY = "What colour fills the image? Choices: A. red B. green C. blue D. yellow"


@register_task("color", choices=LETTERS, thought="the image is mostly one colour", vision=True)
def color_task(rng: np.random.Generator, image_size: int) -> Example:
    k = int(rng.integers(4))
    base = np.empty((image_size, image_size, 3), dtype=np.uint8)
    base[:] = COLOR_RGB[COLOR_NAMES[k]]
    return _example("color", COLOR_BODY, LETTERS[k], (_noisy(base, rng, 12),))


COUNT_BODY = "How many shapes are in the image? Answer with a number from 1 to 4."


@register_task("count", choices=("1", "2", "3", "4"), thought="I count the shapes", vision=True)
def count_task(rng: np.random.Generator, image_size: int) -> Example:
    n = int(rng.integers(1, 5))
    img = _canvas(image_size)
    draw = ImageDraw.Draw(img)
    cell = image_size // 2
    for q in sorted(rng.permutation(4)[:n].tolist()):
        x0, y0 = (q % 2) * cell, (q // 2) * cell
        r = max(2, int(cell * rng.uniform(0.25, 0.4)))
        cx = x0 + cell // 2 + int(rng.integers(-1, 2))
        cy = y0 + cell // 2 + int(rng.integers(-1, 2))
        fill = tuple(int(v) for v in rng.integers(0, 120, size=3))
        box = (cx - r, cy - r, cx + r - 1, cy + r - 1)
        (draw.ellipse if rng.integers(2) else draw.rectangle)(box, fill=fill)
    return _example("count", COUNT_BODY, str(n), (img,))


LONGER_BODY = "Which bar is longer? Choices: A. the top bar B. the bottom bar"


@register_task("longer", choices=("A", "B"), thought="I compare the two bars", vision=True)
def longer_task(rng: np.random.Generator, image_size: int) -> Example:
    short = int(rng.integers(image_size // 8, image_size // 2))
    long = int(rng.integers(short + max(2, image_size // 4), image_size - 1))
    top_longer = bool(rng.integers(2))
    lengths = (long, short) if top_longer else (short, long)
    img = _canvas(image_size)
    draw = ImageDraw.Draw(img)
    thick = max(2, image_size // 8)
    for row, length in enumerate(lengths):
        y = image_size // 4 + row * (image_size // 2) - thick // 2
        draw.rectangle((1, y, length, y + thick - 1), fill=(30, 30, 30))
    return _example("longer", LONGER_BODY, "A" if top_longer else "B", (img,))


DIGIT_BODY = "Which digit is drawn in the image? Answer with a single digit."


def _bitmap_font() -> Any:
    loader = getattr(ImageFont, "load_default_imagefont", None)  # Pillow >= 10.1
    return loader() if loader is not None else ImageFont.load_default()


@register_task("digit", choices=GENERIC_CHOICES, thought="I read the digit", vision=True)
def digit_task(rng: np.random.Generator, image_size: int) -> Example:
    d = int(rng.integers(10))
    glyph = Image.new("L", (16, 16), 0)
    ImageDraw.Draw(glyph).text((2, 1), str(d), fill=255, font=_bitmap_font())
    bbox = glyph.getbbox() or (0, 0, 16, 16)
    glyph = glyph.crop(bbox)
    gh = max(4, int(image_size * 0.75))
    gw = max(2, int(gh * glyph.width / glyph.height))
    glyph = glyph.resize((gw, gh), resample=Image.Resampling.NEAREST)
    img = _canvas(image_size)
    ink = Image.new("RGB", glyph.size, (20, 20, 20))
    ox = (image_size - gw) // 2 + int(rng.integers(-1, 2))
    oy = (image_size - gh) // 2 + int(rng.integers(-1, 2))
    img.paste(ink, (max(0, ox), max(0, oy)), glyph)
    arr = np.asarray(img)
    return _example("digit", DIGIT_BODY, str(d), (_noisy(arr, rng, 6),))


# --------------------------------------------------------------------------- text tasks
@register_task("text_choice", choices=LETTERS, thought="I find the option with that word", vision=False)
def text_choice_task(rng: np.random.Generator, image_size: int) -> Example:
    """The text twin of ``color``: a fixed code maps each colour word to a letter, so the answer is
    a function of the one colour word in the prompt (learnable by a 2-layer model in a smoke run)."""
    target = COLOR_NAMES[int(rng.integers(4))]
    body = f"The colour is {target}. Which letter is its code: A, B, C or D?"
    return _example("text_choice", body, LETTERS[COLOR_NAMES.index(target)])


@register_task("add", choices=tuple(str(v) for v in range(9)), thought="I add the two numbers", vision=False)
def add_task(rng: np.random.Generator, image_size: int) -> Example:
    a, b = (int(v) for v in rng.integers(0, 5, size=2))
    return _example("add", f"What is {a} + {b}? Answer with a number.", str(a + b))
