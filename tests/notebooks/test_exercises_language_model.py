"""The checkers of the chapter "A character-level language model": right attempts pass, and each
usual wrong attempt is rejected with a message that names what is wrong."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from rnnlib.exercises import language_model as lm


def make_windows(ids, starts, length):
    """The chapter's solution, written independently of the checker's reference."""
    positions = starts[:, None] + jnp.arange(length)
    return ids[positions], ids[positions + 1]


def make_windows_numpy(ids, starts, length):
    """Another right answer: a Python loop over slices, in NumPy."""
    ids = np.asarray(ids)
    inputs = np.stack([ids[s : s + length] for s in np.asarray(starts)])
    targets = np.stack([ids[s + 1 : s + length + 1] for s in np.asarray(starts)])
    return inputs, targets


def generate(step, carry, first_id, keys):
    ids, char_id = [], first_id
    for key in keys:
        carry, char_id = step(carry, char_id, key)
        ids.append(char_id)
    return jnp.stack(ids)


def perplexity_optax_free(logits, targets):
    """The chapter's solution: exp of the mean of -log_softmax at the targets."""
    log_p = jax.nn.log_softmax(logits)
    picked = jnp.take_along_axis(log_p, targets[..., None], axis=-1)
    return jnp.exp(-picked.mean())


def perplexity_by_hand(logits, targets):
    """Another right answer, in NumPy: probabilities, then the geometric mean of 1 / p."""
    logits = np.asarray(logits, np.float64)
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    picked = np.take_along_axis(p, np.asarray(targets)[..., None], axis=-1)
    return float(np.prod(1.0 / picked) ** (1.0 / picked.size))


@pytest.mark.parametrize(
    "check, cases, solutions",
    [
        (lm.check_windows, lm.WINDOW_CASES, (make_windows, make_windows_numpy)),
        (lm.check_perplexity, lm.PERPLEXITY_CASES, (perplexity_optax_free, perplexity_by_hand)),
    ],
    ids=["windows", "perplexity"],
)
def test_right_solutions_pass_every_case(check, cases, solutions):
    for solution in solutions:
        feedback = check(solution)
        assert feedback, str(feedback)
        assert str(feedback) == (f"✔ {check.__name__}: all {len(cases)} cases match the reference.")


def test_unshifted_targets_are_named():
    def unshifted(ids, starts, length):
        inputs, _ = make_windows(ids, starts, length)
        return inputs, inputs

    message = str(lm.check_windows(unshifted))
    assert message.startswith("✘ check_windows")
    assert "the targets are the inputs themselves" in message
    # which case and which value: the first target of the first window is position 0, not 1
    assert "case '3 windows of 5 steps': targets[0, 0] is 100; expected 101" in message


def test_targets_shifted_the_wrong_way_are_named():
    def backwards(ids, starts, length):
        positions = starts[:, None] + jnp.arange(length)
        return ids[positions], ids[positions - 1]

    message = str(lm.check_windows(backwards))
    assert "shifted the wrong way, one character earlier" in message
    assert "inputs themselves" not in message


def test_swapped_inputs_and_targets_are_named():
    def swapped(ids, starts, length):
        inputs, targets = make_windows(ids, starts, length)
        return targets, inputs

    message = str(lm.check_windows(swapped))
    assert "inputs and targets are swapped" in message


def test_windows_one_step_too_long_are_named_by_shape():
    def too_long(ids, starts, length):
        positions = starts[:, None] + jnp.arange(length + 1)
        return ids[positions], ids[positions]

    message = str(lm.check_windows(too_long))
    assert "inputs has shape (3, 6); expected (3, 5) ((batch, length) = (3, 5))" in message


def test_a_single_window_array_is_asked_to_be_a_pair():
    message = str(lm.check_windows(lambda ids, starts, length: ids[:length]))
    assert "case '1 window of 1 step': return a pair (inputs, targets); got a" in message


def test_an_attempt_that_raises_is_reported():
    def stub(ids, starts, length):
        raise NotImplementedError("write the windows")

    message = str(lm.check_windows(stub))
    assert "calling it raised NotImplementedError: write the windows" in message


def test_the_generate_solution_passes_every_case():
    feedback = lm.check_generate(generate)
    assert feedback, str(feedback)
    assert str(feedback) == (
        f"✔ check_generate: all {len(lm.GENERATE_CASES)} cases match the reference."
    )


def test_a_carry_that_is_not_threaded_is_named():
    def forgetful(step, carry, first_id, keys):
        ids, char_id = [], first_id
        for key in keys:
            _, char_id = step(carry, char_id, key)  # the new carry is dropped
            ids.append(char_id)
        return jnp.stack(ids)

    message = str(lm.check_generate(forgetful))
    assert message.startswith("✘ check_generate")
    assert "the carry is not threaded through the loop" in message
    assert "case '12 steps from id 4': the ids[" in message


def test_samples_not_fed_back_are_named():
    def not_fed_back(step, carry, first_id, keys):
        ids = []
        for key in keys:
            carry, char_id = step(carry, first_id, key)
            ids.append(char_id)
        return jnp.stack(ids)

    message = str(lm.check_generate(not_fed_back))
    assert "each step is fed the first id again" in message
    assert "not threaded" not in message


def test_one_key_for_every_step_is_named():
    def same_key(step, carry, first_id, keys):
        ids, char_id = [], first_id
        for _ in keys:
            carry, char_id = step(carry, char_id, keys[0])
            ids.append(char_id)
        return jnp.stack(ids)

    message = str(lm.check_generate(same_key))
    assert "every step uses the same key, keys[0]" in message


def test_returning_the_first_id_too_is_named():
    def with_first(step, carry, first_id, keys):
        return jnp.concatenate([jnp.asarray(first_id)[None], generate(step, carry, first_id, keys)])

    message = str(lm.check_generate(with_first))
    assert "has shape (13,); expected (12,)" in message
    assert "first_id included: return the 12 sampled ids, one per key" in message


def test_float_ids_are_named():
    def floats(step, carry, first_id, keys):
        return generate(step, carry, first_id, keys).astype(jnp.float32)

    message = str(lm.check_generate(floats))
    assert "should hold integer character ids; got dtype float32" in message


def test_the_toy_step_depends_on_carry_input_and_key():
    """Each known mistake must give different ids from the right loop, or it is not caught."""
    keys = jax.random.split(jax.random.key(0), 12)
    args = (lm.toy_step, lm._toy_carry(), jnp.int32(4), keys)
    right = lm._generate(*args)
    for kwargs in (dict(thread=False), dict(feed=False), dict(fresh_keys=False)):
        assert not np.array_equal(lm._generate(*args, **kwargs), right), kwargs


def test_a_uniform_model_has_the_vocabulary_size_as_its_perplexity():
    """The checker's reference, through a right answer: equal logits give perplexity V."""
    logits, targets = jnp.zeros((2, 3, 13)), jnp.zeros((2, 3), jnp.int32)
    assert abs(float(perplexity_optax_free(logits, targets)) - 13.0) < 1e-4


def test_the_cross_entropy_without_its_exponential_is_named():
    def no_exp(logits, targets):
        return jnp.log(perplexity_optax_free(logits, targets))

    message = str(lm.check_perplexity(no_exp))
    assert message.startswith("✘ check_perplexity: 2 problem(s)")
    assert "it is the mean cross-entropy itself, ln(perplexity): take its exp" in message


def test_the_mean_of_each_positions_exponential_is_named():
    def mean_of_exps(logits, targets):
        log_p = jax.nn.log_softmax(logits)
        picked = jnp.take_along_axis(log_p, targets[..., None], axis=-1)
        return jnp.exp(-picked).mean()

    message = str(lm.check_perplexity(mean_of_exps))
    assert "the mean of exp(cross-entropy) over the positions" in message


def test_a_sum_instead_of_a_mean_is_named():
    def summed(logits, targets):
        log_p = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(log_p, targets[..., None], axis=-1).sum()

    assert "the summed cross-entropy: average it" in str(lm.check_perplexity(summed))


def test_a_missing_minus_sign_is_named():
    def reciprocal(logits, targets):
        return 1.0 / perplexity_optax_free(logits, targets)

    assert "it is 1 / perplexity" in str(lm.check_perplexity(reciprocal))


def test_one_perplexity_per_sequence_is_named_by_its_shape():
    def per_sequence(logits, targets):
        log_p = jax.nn.log_softmax(logits)
        picked = jnp.take_along_axis(log_p, targets[..., None], axis=-1)[..., 0]
        return jnp.exp(-picked.mean(axis=-1))

    message = str(lm.check_perplexity(per_sequence))
    assert "case 'batch 2, 5 steps, 7 characters': the perplexity has shape (2,)" in message


def test_a_wrong_value_with_no_known_cause_gives_both_numbers():
    message = str(lm.check_perplexity(lambda logits, targets: 1.0))
    for name, (logits, targets) in lm.perplexity_cases():
        want = perplexity_by_hand(logits, targets)
        assert f"case '{name}': the perplexity is 1; expected {want:.4g}" in message


def trigram_counting(train_ids, held_ids, vocab_size, alpha):
    """A right answer written with dicts, independently of the checker's NumPy reference."""
    train, held = [int(i) for i in train_ids], [int(i) for i in held_ids]
    triples, pairs = {}, {}
    for a, b, c in zip(train, train[1:], train[2:]):
        triples[a, b, c] = triples.get((a, b, c), 0) + 1
        pairs[a, b] = pairs.get((a, b), 0) + 1
    total = 0.0
    for a, b, c in zip(held, held[1:], held[2:]):
        p = (triples.get((a, b, c), 0) + alpha) / (pairs.get((a, b), 0) + alpha * vocab_size)
        total -= np.log(p)
    return float(np.exp(total / (len(held) - 2)))


def trigram_table(train_ids, held_ids, vocab_size, alpha, *, plus=None, context=2, swap=False):
    """The chapter's solution (the defaults), or a wrong variant of it."""
    train, held = np.asarray(train_ids), np.asarray(held_ids)
    counts = np.zeros((vocab_size,) * (context + 1))
    if context == 2:
        np.add.at(counts, (train[:-2], train[1:-1], train[2:]), 1)
        first, second = (held[1:-1], held[:-2]) if swap else (held[:-2], held[1:-1])
        index = (first, second, held[2:])
    else:
        np.add.at(counts, (train[:-1], train[1:]), 1)
        index = (held[1:-1], held[2:])
    below = counts.sum(axis=-1, keepdims=True) + (alpha * vocab_size if plus is None else plus)
    with np.errstate(divide="ignore", invalid="ignore"):
        p = (counts + alpha) / below
        return np.exp(-np.log(p[index]).mean())


def test_right_trigram_solutions_pass_every_case():
    for solution in (trigram_counting, trigram_table):
        feedback = lm.check_trigram(solution)
        assert feedback, str(feedback)
        assert str(feedback) == (
            f"✔ check_trigram: all {len(lm.TRIGRAM_CASES)} cases match the reference."
        )


def test_the_trigram_cases_hold_an_unseen_triple_and_more_than_one_context():
    for _, (train, held, vocab_size, _) in lm.trigram_cases():
        seen = set(zip(train[:-2].tolist(), train[1:-1].tolist(), train[2:].tolist()))
        assert tuple(held[-3:].tolist()) not in seen
        assert len({(a, b) for a, b, _ in seen}) > vocab_size  # the pair matters, not one id


@pytest.mark.parametrize(
    "wrong, named",
    [
        (
            lambda t, h, v, a: trigram_table(t, h, v, 0.0),
            "a triple that the training text never has got probability 0",
        ),
        (
            lambda t, h, v, a: trigram_table(t, h, v, a, plus=0.0),
            "alpha is added to each count but not to the total",
        ),
        (
            lambda t, h, v, a: trigram_table(t, h, v, a, plus=a),
            "so add alpha * vocab_size",
        ),
        (
            lambda t, h, v, a: trigram_table(t, h, v, a, context=1),
            "it is the bigram's perplexity",
        ),
        (
            lambda t, h, v, a: trigram_table(t, h, v, a, swap=True),
            "the two context characters are swapped when scoring",
        ),
        (
            lambda t, h, v, a: trigram_table(h, h, v, a),
            "the counts come from the held-out text",
        ),
    ],
    ids=["no-smoothing", "numerator-only", "alpha-once", "bigram", "swapped", "held-out-counts"],
)
def test_usual_trigram_mistakes_are_named(wrong, named):
    message = str(lm.check_trigram(wrong))
    assert message.startswith("✘ check_trigram: 2 problem(s).")
    assert "case '5 characters, add-one': the perplexity is " in message
    assert named in message


def test_a_trigram_off_for_another_reason_says_only_the_numbers():
    def squared(train, held, vocab_size, alpha):
        return trigram_counting(train, held, vocab_size, alpha) ** 2

    message = str(lm.check_trigram(squared))
    want = trigram_counting(*lm.trigram_cases()[0][1])
    assert f"the perplexity is {want**2:.4g}; expected {want:.4g}\n" in message


def test_a_trigram_per_position_or_a_stub_is_reported():
    def per_position(train, held, vocab_size, alpha):
        return np.ones(len(held) - 2)

    def stub(train, held, vocab_size, alpha):
        raise NotImplementedError("count the triples")

    assert "the perplexity has shape (63,); expected one number" in str(
        lm.check_trigram(per_position)
    )
    assert "calling it raised NotImplementedError: count the triples" in str(lm.check_trigram(stub))
