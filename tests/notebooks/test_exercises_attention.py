"""The attention chapter's checkers accept right answers and name wrong ones in words."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises.attention import (
    ATTEND_CASES,
    SCORE_CASES,
    _attend_case,
    check_attend,
    check_sequence_log_prob,
    reference_attend,
    reference_sequence_log_prob,
)
from rnnlib.exercises.encoder_decoder import _toy_decoder
from tests.tolerance import assert_close


def attend(query, states, mask):
    scores = jnp.einsum("bh,bsh->bs", query, states)
    weights = jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), axis=-1)
    return jnp.einsum("bs,bsh->bh", weights, states), weights


def sequence_log_prob(step, carry, start, tokens):
    reads = jnp.concatenate([jnp.full_like(tokens[:, :1], start), tokens[:, :-1]], axis=1)
    total = jnp.zeros(tokens.shape[0])
    for t in range(tokens.shape[1]):
        carry, logits = step(carry, reads[:, t])
        log_probs = jax.nn.log_softmax(logits)
        total = total + jnp.take_along_axis(log_probs, tokens[:, t : t + 1], axis=1)[:, 0]
    return total


def test_attend_accepts_the_solution_and_a_large_negative_mask():
    assert check_attend(attend)

    def large_negative(query, states, mask):
        scores = jnp.einsum("bh,bsh->bs", query, states)
        weights = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
        return jnp.einsum("bs,bsh->bh", weights, states), weights

    assert check_attend(large_negative)


def test_reference_attend_matches_flax_dot_product_attention_weights():
    """The reference is Flax's dot-product weights without the 1/sqrt(d) scale, masked."""
    import flax.linen as nn

    for index, (_, batch, source, hidden, padding) in enumerate(ATTEND_CASES):
        query, states, mask = _attend_case(index, batch, source, hidden, padding)
        flax_weights = nn.dot_product_attention_weights(
            query[:, None, None] * np.sqrt(hidden),  # (batch, q=1, heads=1, hidden)
            states[:, :, None],  # (batch, source, heads=1, hidden)
            mask=mask[:, None, None, :],  # (batch, heads, q, source)
        )[:, 0, 0]
        context, weights = reference_attend(query, states, mask)
        assert_close(weights, np.asarray(flax_weights), terms=hidden)
        assert_close(
            context, np.einsum("bs,bsh->bh", np.asarray(flax_weights), states), terms=source
        )
        assert np.all(weights[~mask] == 0)


def test_attend_names_a_softmax_along_the_batch_axis():
    def batch_axis(query, states, mask):
        scores = jnp.where(mask, jnp.einsum("bh,bsh->bs", query, states), -jnp.inf)
        weights = jax.nn.softmax(scores, axis=0)
        return jnp.einsum("bs,bsh->bh", weights, states), weights

    feedback = check_attend(batch_axis)
    assert not feedback and "along the batch axis" in str(feedback)


def test_attend_names_an_ignored_mask_and_a_mask_after_the_softmax():
    def no_mask(query, states, mask):
        weights = jax.nn.softmax(jnp.einsum("bh,bsh->bs", query, states), axis=-1)
        return jnp.einsum("bs,bsh->bh", weights, states), weights

    def mask_after(query, states, mask):
        weights = jax.nn.softmax(jnp.einsum("bh,bsh->bs", query, states), axis=-1) * mask
        return jnp.einsum("bs,bsh->bh", weights, states), weights

    ignored = check_attend(no_mask)
    assert not ignored and "Padded positions get weight" in str(ignored)
    assert "no padding" not in str(ignored)  # the unpadded case is right without a mask
    assert "after the softmax" in str(check_attend(mask_after))


def test_attend_names_raw_scores_a_wrong_context_and_a_missing_tuple():
    def scores_only(query, states, mask):
        scores = jnp.where(mask, jnp.einsum("bh,bsh->bs", query, states), 0.0)
        return jnp.einsum("bs,bsh->bh", scores, states), scores

    def context_of_scores(query, states, mask):
        context, weights = attend(query, states, mask)
        return jnp.einsum("bh,bsh->bh", query, states), weights

    assert "the scores themselves" in str(check_attend(scores_only))
    wrong_context = str(check_attend(context_of_scores))
    assert "the context" in wrong_context and "The weights are right" in wrong_context
    assert "two arrays, (context, weights)" in str(check_attend(lambda q, s, m: attend(q, s, m)[1]))


def test_attend_names_transposed_weights_and_what_an_attempt_raised():
    def transposed(query, states, mask):
        context, weights = attend(query, states, mask)
        return context, weights.T

    def broken(query, states, mask):
        raise NotImplementedError("later")

    assert "(source, batch)" in str(check_attend(transposed))
    assert "raised NotImplementedError: later" in str(check_attend(broken))


def test_the_attend_cases_tell_each_mistake_apart_from_the_right_answer():
    """Padding changes the weights of the padded case, so an ignored mask cannot pass there."""
    padded = 0
    for index, (_, batch, source, hidden, padding) in enumerate(ATTEND_CASES):
        query, states, mask = _attend_case(index, batch, source, hidden, padding)
        _, weights = reference_attend(query, states, mask)
        unmasked = np.asarray(jax.nn.softmax(np.einsum("bh,bsh->bs", query, states), axis=-1))
        assert np.array_equal(mask.sum(axis=1), source - np.asarray(padding))
        if any(padding):
            padded += 1
            assert np.all(weights[~mask] == 0) and np.all(unmasked[~mask] > 0)
        else:
            assert_close(weights, unmasked, terms=hidden)
        scores = np.where(mask, np.einsum("bh,bsh->bs", query, states), -np.inf)
        by_batch = np.asarray(jax.nn.softmax(scores, axis=0))  # the batch-axis mistake
        assert np.abs(by_batch - weights).max() > 0.1
    assert padded == 1


def test_sequence_log_prob_accepts_a_loop_a_scan_and_a_jitted_attempt():
    def scan(step, carry, start, tokens):
        reads = jnp.concatenate([jnp.full_like(tokens[:, :1], start), tokens[:, :-1]], axis=1)

        def one(carry, read_and_token):
            read, token = read_and_token
            carry, logits = step(carry, read)
            return carry, jax.nn.log_softmax(logits)[jnp.arange(token.shape[0]), token]

        return jax.lax.scan(one, carry, (reads.T, tokens.T))[1].sum(axis=0)

    assert check_sequence_log_prob(sequence_log_prob)
    assert check_sequence_log_prob(scan)
    assert check_sequence_log_prob(jax.jit(scan, static_argnums=(0, 2)))


def test_reference_sequence_log_prob_is_the_log_of_the_product_of_step_probabilities():
    """Computed independently: softmax probabilities multiplied step by step, in float64."""
    for index, (_, batch, steps, start) in enumerate(SCORE_CASES):
        step, carry = _toy_decoder(index, batch)
        tokens = np.random.default_rng(10 + index).integers(0, 7, (batch, steps))
        probability = np.ones(batch)
        read = np.full(batch, start, np.int32)
        for t in range(steps):
            carry, logits = step(carry, read)
            logits = np.asarray(logits, np.float64)
            soft = np.exp(logits - logits.max(axis=1, keepdims=True))
            soft /= soft.sum(axis=1, keepdims=True)
            probability *= soft[np.arange(batch), tokens[:, t]]
            read = tokens[:, t].astype(np.int32)
        step, carry = _toy_decoder(index, batch)
        got = reference_sequence_log_prob(step, carry, start, tokens)
        assert_close(got, np.log(probability).astype(np.float32), terms=steps)


def test_sequence_log_prob_names_logits_greedy_feeding_and_no_shift():
    def summed_logits(step, carry, start, tokens):
        read, total = jnp.full(tokens.shape[:1], start, jnp.int32), 0.0
        for t in range(tokens.shape[1]):
            carry, logits = step(carry, read)
            total = total + jnp.take_along_axis(logits, tokens[:, t : t + 1], axis=1)[:, 0]
            read = tokens[:, t]
        return total

    def greedy_feeding(step, carry, start, tokens):
        read, total = jnp.full(tokens.shape[:1], start, jnp.int32), 0.0
        for t in range(tokens.shape[1]):
            carry, logits = step(carry, read)
            log_probs = jax.nn.log_softmax(logits)
            total = total + jnp.take_along_axis(log_probs, tokens[:, t : t + 1], axis=1)[:, 0]
            read = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return total

    def unshifted(step, carry, start, tokens):
        total = 0.0
        for t in range(tokens.shape[1]):
            carry, logits = step(carry, tokens[:, t])
            log_probs = jax.nn.log_softmax(logits)
            total = total + jnp.take_along_axis(log_probs, tokens[:, t : t + 1], axis=1)[:, 0]
        return total

    assert "sum the logits" in str(check_sequence_log_prob(summed_logits))
    assert "its own argmax" in str(check_sequence_log_prob(greedy_feeding))
    assert "unshifted" in str(check_sequence_log_prob(unshifted))


def test_sequence_log_prob_names_a_mean_per_step_values_and_a_stub():
    def mean(step, carry, start, tokens):
        return sequence_log_prob(step, carry, start, tokens) / tokens.shape[1]

    def per_step(step, carry, start, tokens):
        return jnp.repeat(
            sequence_log_prob(step, carry, start, tokens)[:, None], tokens.shape[1], 1
        )

    def stub(step, carry, start, tokens):
        return jnp.zeros(tokens.shape[0])

    assert "the mean over the steps" in str(check_sequence_log_prob(mean))
    assert "one number per step" in str(check_sequence_log_prob(per_step))
    stubbed = check_sequence_log_prob(stub)
    assert not stubbed and "log-probabilities[" in str(stubbed)
    assert "These are" not in str(stubbed)  # no mistake guessed for an unwritten attempt
