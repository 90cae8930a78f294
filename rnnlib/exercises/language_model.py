"""Checkers for the chapter "A character-level language model" (``book/language_model.ipynb``).

``check_windows`` runs the reader's ``make_windows(ids, starts, length)``, which cuts training
windows out of a text; ``check_perplexity`` runs the reader's ``perplexity(logits, targets)``;
``check_generate`` runs the reader's ``generate(step, carry, first_id, keys)``, the loop that
writes text one character at a time; and ``check_trigram`` runs the reader's
``trigram_perplexity(train_ids, held_ids, vocab_size, alpha)``, a counting baseline. Each
compares with a reference on a few cases; when the values are wrong it also runs the usual
mistakes (targets not shifted by one, a cross-entropy without its exponential, the carry not
threaded through the loop, smoothing that does not add up to 1, ...) and, if the attempt matches
one, says which::

    from rnnlib.exercises.language_model import check_windows
    check_windows(make_windows)   # ✘ check_windows: ... the targets are the inputs themselves
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises._check import Feedback, case_problems, compare

# Character ids that are their own position plus 100, so that a wrong value names the position
# it was read from: id 112 is the character at position 12.
_TEXT = jnp.arange(100, 140, dtype=jnp.int32)
WINDOW_CASES = (
    ("3 windows of 5 steps", (0, 4, 17), 5),
    ("1 window of 1 step", (7,), 1),
    ("a window whose last target is the text's last character", (30, 2), 9),
)


def _windows(ids, starts, length):
    """The reference: inputs at ``start + t``, targets one character later."""
    positions = np.asarray(starts)[:, None] + np.arange(length)
    ids = np.asarray(ids)
    return ids[positions], ids[positions + 1]


_WINDOW_MISTAKES = (
    (
        lambda i, t, want_i, want_t: np.array_equal(i, want_t) and np.array_equal(t, want_i),
        "inputs and targets are swapped: return (inputs, targets), the targets one "
        "character later than the inputs",
    ),
    (
        lambda i, t, want_i, want_t: np.array_equal(t, want_i),
        "the targets are the inputs themselves: the model would learn to copy its input. "
        "The target at step t is the character after input t, ids[start + t + 1]",
    ),
    (
        lambda i, t, want_i, want_t: (
            i.shape[-1] > 1 and np.array_equal(t[..., 1:], want_i[..., :-1])
        ),
        "the targets are shifted the wrong way, one character earlier than the inputs; "
        "the target at step t is ids[start + t + 1]",
    ),
    (
        lambda i, t, want_i, want_t: (
            i.shape[-1] > 1 and np.array_equal(t[..., :-1], want_t[..., 1:])
        ),
        "the targets are shifted by two: the target at step t is ids[start + t + 1], "
        "one character after the input, not two",
    ),
)


def _as_int_array(name: str, value) -> tuple[np.ndarray | None, str | None]:
    try:
        array = np.asarray(value)
    except Exception:  # a value NumPy cannot read as an array
        return None, f"{name} should be an array of character ids; got {type(value).__name__}"
    if not np.issubdtype(array.dtype, np.integer):
        return None, f"{name} should hold integer character ids; got dtype {array.dtype}"
    return array.astype(np.int64), None


def check_windows(make_windows: Callable[..., Any]) -> Feedback:
    """Check ``make_windows(ids, starts, length) -> (inputs, targets)``.

    ``ids`` is a text as a 1-D array of character ids, ``starts`` a 1-D int array of
    ``batch`` window starts and ``length`` an int. Both results are ``(batch, length)``:
    ``inputs[b, t] = ids[starts[b] + t]`` and ``targets[b, t] = ids[starts[b] + t + 1]``, the
    character that follows each input, which is what a language model learns to predict.
    """
    diagnoses = []

    def judge(got, ids, starts, length) -> str | None:
        want_inputs, want_targets = _windows(ids, starts, length)
        if not isinstance(got, (tuple, list)) or len(got) != 2:
            what = f"a {type(got).__name__}"
            if isinstance(got, (tuple, list)):
                what += f" of {len(got)}"
            return f"return a pair (inputs, targets); got {what}"
        arrays = [_as_int_array(label, v) for label, v in zip(("inputs", "targets"), got)]
        problem = next((message for _, message in arrays if message), None)
        if problem is None:
            (inputs, _), (targets, _) = arrays
            problem = compare("inputs", inputs, want_inputs.astype(np.int64)) or compare(
                "targets", targets, want_targets.astype(np.int64)
            )
            if problem and "shape" in problem:
                problem += f" ((batch, length) = ({len(starts)}, {length}))"
        if problem is None:
            return None
        if arrays[0][1] is None and arrays[1][1] is None:
            inputs, targets = arrays[0][0], arrays[1][0]
            for matches, diagnosis in _WINDOW_MISTAKES:
                same_shape = inputs.shape == targets.shape == want_inputs.shape
                if same_shape and matches(inputs, targets, want_inputs, want_targets):
                    if diagnosis not in diagnoses:
                        diagnoses.append(diagnosis)
                    break
        return problem

    cases = [
        (name, (_TEXT, jnp.asarray(starts, jnp.int32), length))
        for name, starts, length in WINDOW_CASES
    ]
    problems = case_problems(make_windows, cases, judge)
    problems += [f"the values match a known mistake: {d}." for d in diagnoses]
    return Feedback("check_windows", len(WINDOW_CASES), tuple(problems))


# Logits and targets for check_perplexity: seeded, of two shapes, scaled so that the
# perplexities (about 11 and 25) are far from their logarithms, their reciprocals and the
# other slips.
PERPLEXITY_CASES = (("batch 2, 5 steps, 7 characters", (2, 5, 7), 0),
                    ("batch 3, 4 steps, 11 characters", (3, 4, 11), 1))  # fmt: skip


def _cross_entropies(logits, targets):
    """``-ln p(target)`` at every position, in float64: ``(batch, time)``."""
    logits = np.asarray(logits, np.float64)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))
    return -np.take_along_axis(log_p, np.asarray(targets)[..., None], axis=-1)[..., 0]


def _perplexity_mistakes(logits, targets):
    """(value, what it means) for the usual wrong perplexities of these logits."""
    ce = _cross_entropies(logits, targets)
    return (
        (ce.mean(), "it is the mean cross-entropy itself, ln(perplexity): take its exp"),
        (np.exp(-ce.mean()), "it is 1 / perplexity: the cross-entropy is -ln p, with a minus"),
        (np.exp(ce).mean(), "it is the mean of exp(cross-entropy) over the positions; the "
         "perplexity is exp of the mean, which is smaller"),
        (np.exp(ce.sum()), "it is exp of the summed cross-entropy: average over the positions"),
        (ce.sum(), "it is the summed cross-entropy: average it, then take its exp"),
        (2.0 ** ce.mean(), "it is 2 ** (mean cross-entropy) with the cross-entropy in nats: "
         "use exp with natural logarithms (or 2 ** with log2 throughout)"),
    )  # fmt: skip


def perplexity_cases():
    """``[(name, (logits, targets))]``: the cases ``check_perplexity`` runs."""
    cases = []
    for name, shape, seed in PERPLEXITY_CASES:
        rng = np.random.default_rng(seed)
        logits = jnp.asarray(1.5 * rng.normal(size=shape), jnp.float32)
        targets = jnp.asarray(rng.integers(0, shape[-1], shape[:-1]), jnp.int32)
        cases.append((name, (logits, targets)))
    return cases


def check_perplexity(perplexity: Callable[..., Any]) -> Feedback:
    """Check ``perplexity(logits, targets) -> number``.

    ``logits`` is ``(batch, time, vocab)`` floats and ``targets`` is ``(batch, time)`` int
    character ids. The perplexity is ``exp`` of the mean, over every position, of the
    cross-entropy ``-ln softmax(logits)[target]``: one number.
    """

    def judge(got, logits, targets) -> str | None:
        want = float(np.exp(_cross_entropies(logits, targets).mean()))
        try:
            value = np.asarray(got, dtype=np.float64)
        except Exception:  # a value NumPy cannot read as a number
            return f"the perplexity should be one number; got {type(got).__name__}"
        if value.size != 1:
            return (
                f"the perplexity has shape {value.shape}; expected one number, the mean over "
                "every position of the batch, exponentiated once"
            )
        value = float(value.reshape(()))
        if abs(value - want) <= 1e-4 * want:
            return None
        problem = f"the perplexity is {value:.4g}; expected {want:.4g}"
        for mistake, meaning in _perplexity_mistakes(logits, targets):
            if np.isfinite(mistake) and abs(value - mistake) <= 1e-4 * abs(mistake):
                return f"{problem}: {meaning}"
        return problem

    cases = perplexity_cases()
    return Feedback("check_perplexity", len(cases), tuple(case_problems(perplexity, cases, judge)))


# A toy model for check_generate: 11 "characters", a carry of two int arrays like an LSTM's
# (c, h), and a sample that depends on the carry, on the input and on the key, so that a loop
# which drops any of the three gives different ids.
VOCAB = 11


def toy_step(carry, char_id, key):
    """``(carry, char_id, key) -> (carry, next_id)``, the shape of one sampling step."""
    count, last = carry
    noise = jax.random.randint(key, (), 0, VOCAB)
    next_id = (3 * count + 5 * char_id + noise + last) % VOCAB
    return (count + 1, jnp.asarray(char_id, jnp.int32)), next_id


def _toy_carry():
    return (jnp.int32(2), jnp.int32(0))


def _generate(step, carry, first_id, keys, *, thread=True, feed=True, fresh_keys=True):
    """The reference loop (all True), or one of the usual wrong loops."""
    start, char_id, ids = carry, first_id, []
    for index in range(len(keys)):
        key = keys[index] if fresh_keys else keys[0]
        new_carry, next_id = step(carry, char_id, key)
        carry = new_carry if thread else start
        char_id = next_id if feed else first_id
        ids.append(int(next_id))
    return np.asarray(ids, np.int64)


GENERATE_CASES = (("12 steps from id 4", 4, 12, 0), ("3 steps from id 0", 0, 3, 1))
_GENERATE_MISTAKES = (
    (
        dict(thread=False),
        "the carry is not threaded through the loop: every step starts from the first "
        "carry, so the model forgets what it wrote. Pass each step's new carry to the next",
    ),
    (
        dict(feed=False),
        "each step is fed the first id again: feed each sampled id back in as the next "
        "step's input",
    ),
    (
        dict(fresh_keys=False),
        "every step uses the same key, keys[0]: use keys[i] at step i, so that each "
        "sample draws fresh randomness",
    ),
    (
        dict(thread=False, feed=False),
        "neither the carry nor the sampled id goes on to the next step: pass each step's "
        "new carry and its sampled id to the next",
    ),
)


def check_generate(generate: Callable[..., Any]) -> Feedback:
    """Check ``generate(step, carry, first_id, keys) -> ids``.

    ``step(carry, char_id, key) -> (carry, next_id)`` is one sampling step of a model;
    ``generate`` calls it once per key in ``keys`` (an array of ``n`` keys), threading the
    carry through and feeding each sampled id back in as the next input, and returns the
    ``n`` sampled ids (not ``first_id``). The checker's ``step`` is a small toy whose carry,
    like an LSTM's, is a pair of arrays.
    """
    diagnoses = []

    def judge(got, step, carry, first_id, keys) -> str | None:
        args = (step, carry, first_id, keys)
        want = _generate(*args)
        steps = len(keys)
        ids, problem = _as_int_array("the ids", got)
        if problem is None:
            problem = compare("the ids", ids, want)
        if problem is None:
            return None
        if ids is not None and ids.shape == (steps + 1,):
            first = ids[0] == int(first_id) and np.array_equal(ids[1:], want)
            hint = "first_id included" if first else f"{steps + 1} ids"
            problem += f" ({hint}: return the {steps} sampled ids, one per key)"
        if ids is not None and ids.shape == want.shape:
            for kwargs, diagnosis in _GENERATE_MISTAKES:
                if np.array_equal(ids, _generate(*args, **kwargs)):
                    if diagnosis not in diagnoses:
                        diagnoses.append(diagnosis)
                    break
        return problem

    cases = []
    for name, first_id, steps, seed in GENERATE_CASES:
        keys = jax.random.split(jax.random.key(seed), steps)
        cases.append((name, (toy_step, _toy_carry(), jnp.int32(first_id), keys)))
    problems = case_problems(generate, cases, judge)
    problems += [f"the values match a known mistake: {d}." for d in diagnoses]
    return Feedback("check_generate", len(GENERATE_CASES), tuple(problems))


# Texts for check_trigram: a few hundred ids of a small vocabulary, drawn from a chain whose
# next id depends on the two before it, so that a trigram, a bigram and a swapped context give
# different perplexities. The held-out text ends in a triple the training text never has, so
# that a model without smoothing gives it probability 0.
TRIGRAM_CASES = (
    ("5 characters, add-one", 5, 1.0, 0),
    ("4 characters, add-0.1", 4, 0.1, 1),
)


def trigram_cases():
    """``[(name, (train_ids, held_ids, vocab_size, alpha))]``: what ``check_trigram`` runs."""
    cases = []
    for name, vocab_size, alpha, seed in TRIGRAM_CASES:
        rng = np.random.default_rng(seed)
        favourite = rng.integers(0, vocab_size, (vocab_size, vocab_size))
        ids = [0, 1]
        for _ in range(460):  # the favourite next id four times in five, else any id
            a, b = ids[-2], ids[-1]
            chosen = favourite[a, b] if rng.random() < 0.8 else rng.integers(0, vocab_size)
            ids.append(int(chosen))
        train, held = ids[:400], ids[400:]
        seen = set(zip(train, train[1:], train[2:]))
        unseen = next(
            (a, b, c)
            for a in range(vocab_size)
            for b in range(vocab_size)
            for c in range(vocab_size)
            if (a, b, c) not in seen
        )
        held = held + list(unseen)
        cases.append(
            (
                name,
                (np.asarray(train, np.int32), np.asarray(held, np.int32), vocab_size, alpha),
            )
        )
    return cases


def _trigram(train, held, vocab_size, alpha, *, context=2, swap=False, denominator="V",
             counts_from=None):  # fmt: skip
    """The reference perplexity (the defaults), or one of the usual wrong ones."""
    source = np.asarray(train if counts_from is None else counts_from, np.int64)
    held = np.asarray(held, np.int64)
    shape = (vocab_size,) * (context + 1)
    counts = np.zeros(shape)
    if context == 2:
        np.add.at(counts, (source[:-2], source[1:-1], source[2:]), 1)
        index = (held[1:-1], held[:-2]) if swap else (held[:-2], held[1:-1])  # swap: in scoring
        index = (*index, held[2:])
    else:  # a bigram, still scored on the characters from the third on
        np.add.at(counts, (source[:-1], source[1:]), 1)
        index = (held[1:-1], held[2:])
    totals = counts.sum(axis=-1, keepdims=True)
    below = {"V": totals + alpha * vocab_size, "one": totals + alpha, "none": totals}[denominator]
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (counts + alpha) / below
        return float(np.exp(-np.log(p[index]).mean()))


_TRIGRAM_MISTAKES = (
    (
        dict(denominator="none"),
        "alpha is added to each count but not to the total it is divided by, so a context's "
        "probabilities add up to more than 1 and the perplexity comes out too low. Divide by "
        "the context's count plus alpha times the vocabulary size",
    ),
    (
        dict(denominator="one"),
        "the total is the context's count plus alpha, once: alpha was added to every one of "
        "the vocab_size counts, so add alpha * vocab_size",
    ),
    (
        dict(context=1),
        "it is the bigram's perplexity: each character is predicted from the one before it "
        "only. A trigram counts what follows each pair of characters",
    ),
    (
        dict(swap=True),
        "the two context characters are swapped when scoring: the counts are indexed "
        "(ids[t - 2], ids[t - 1], ids[t]) when counting, so look them up in that order too",
    ),
    (
        dict(counts_from="held"),
        "the counts come from the held-out text: a baseline learns from the training text "
        "only, and is scored on text it has not seen",
    ),
)


def check_trigram(trigram_perplexity: Callable[..., Any]) -> Feedback:
    """Check ``trigram_perplexity(train_ids, held_ids, vocab_size, alpha) -> number``.

    ``train_ids`` and ``held_ids`` are 1-D int arrays of ids below ``vocab_size``. The model
    counts, in the training text, how often each id ``c`` follows each pair ``(a, b)``, adds
    ``alpha`` to every count, and predicts ``p(c | a, b) = (n(a, b, c) + alpha) / (n(a, b) +
    alpha * vocab_size)``. The result is its perplexity on the held-out text: ``exp`` of the
    mean of ``-ln p(held[t] | held[t - 2], held[t - 1])`` over ``t = 2, 3, ...``, the first two
    ids being context only.
    """

    def judge(got, train, held, vocab_size, alpha) -> str | None:
        want = _trigram(train, held, vocab_size, alpha)
        try:
            value = np.asarray(got, dtype=np.float64)
        except Exception:  # a value NumPy cannot read as a number
            return f"the perplexity should be one number; got {type(got).__name__}"
        if value.size != 1:
            return f"the perplexity has shape {value.shape}; expected one number"
        value = float(value.reshape(()))
        if abs(value - want) <= 1e-6 * want:
            return None
        problem = f"the perplexity is {value:.4g}; expected {want:.4g}"
        if not np.isfinite(value):
            return (
                f"{problem}: a triple that the training text never has got probability 0 "
                "(or a pair it never has was divided by 0). Add alpha to every count"
            )
        for kwargs, meaning in _TRIGRAM_MISTAKES:
            if kwargs.get("counts_from") == "held":
                kwargs = dict(counts_from=held)
            mistake = _trigram(train, held, vocab_size, alpha, **kwargs)
            if np.isfinite(mistake) and abs(value - mistake) <= 1e-6 * mistake:
                return f"{problem}: {meaning}"
        return problem

    cases = trigram_cases()
    problems = case_problems(trigram_perplexity, cases, judge)
    return Feedback("check_trigram", len(cases), tuple(problems))
