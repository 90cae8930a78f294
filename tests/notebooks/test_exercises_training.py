"""The training chapter's checkers: a mean over valid steps, and a bidirectional GRU tagger
written as a flax.linen module, each told apart from its usual mistakes."""

import flax.linen as nn
import jax.numpy as jnp
import pytest

from rnnlib.exercises.training import check_masked_mean, check_tagger_module


def solution(per_step, mask):
    return jnp.sum(jnp.where(mask, per_step, 0.0)) / jnp.sum(mask)


def test_the_solution_passes():
    feedback = check_masked_mean(solution)
    assert feedback and "all 3 cases" in str(feedback)


def test_dividing_by_batch_times_time_is_named():
    feedback = check_masked_mean(lambda p, mask: jnp.mean(p * mask))
    assert not feedback
    assert "divided by batch * time, so padding still counts" in str(feedback)


def test_a_mean_of_per_sequence_means_is_named():
    def per_sequence(p, mask):
        return jnp.mean(jnp.sum(p * mask, axis=1) / jnp.sum(mask, axis=1))

    feedback = check_masked_mean(per_sequence)
    assert not feedback
    assert "a short sequence's steps weigh more" in str(feedback)


def test_ignoring_the_mask_is_named():
    feedback = check_masked_mean(lambda p, mask: jnp.mean(p))
    assert not feedback
    assert "the mean over every step, padding included" in str(feedback)


def test_returning_an_array_instead_of_a_number_is_reported():
    feedback = check_masked_mean(lambda p, mask: p * mask)
    assert not feedback
    assert "has shape (3, 6); expected ()" in str(feedback)


def test_returning_no_number_at_all_is_reported_not_raised():
    feedback = check_masked_mean(lambda p, mask: None)
    assert not feedback
    assert "the mean should be one number; got NoneType" in str(feedback)
    assert "(return one number: the mean over every valid step" in str(feedback)


def _tagger(cell=nn.GRUCell, bidirectional=True, pass_lengths=True, squeeze=True):
    """A tagger module class built from the options: the solution by default."""

    class Tagger(nn.Module):
        hidden: int

        @nn.compact
        def __call__(self, x, seq_lengths):
            lengths = {"seq_lengths": seq_lengths} if pass_lengths else {}
            if bidirectional:
                rnn = nn.Bidirectional(nn.RNN(cell(self.hidden)), nn.RNN(cell(self.hidden)))
            else:
                rnn = nn.RNN(cell(self.hidden))
            logits = nn.Dense(1)(rnn(x, **lengths))
            return logits[..., 0] if squeeze else logits

    return Tagger


def test_the_tagger_solution_passes():
    feedback = check_tagger_module(_tagger())
    assert feedback, str(feedback)
    assert "all 5 cases" in str(feedback)


@pytest.mark.parametrize(
    "options, messages",
    [
        (
            {"bidirectional": False},
            ["matches one direction only", "needs a backward direction"],
        ),
        ({"pass_lengths": False}, ["pass seq_lengths to nn.Bidirectional"]),
        ({"squeeze": False}, ["have shape (3, 7, 1); expected (3, 7)", "[..., 0]"]),
        ({"cell": nn.LSTMCell}, ["233 parameters; expected 185"]),
    ],
    ids=["forward-only", "no-seq-lengths", "trailing-axis", "lstm"],
)
def test_a_wrong_tagger_is_told_what_is_wrong(options, messages):
    feedback = check_tagger_module(_tagger(**options))
    assert not feedback
    for message in messages:
        assert message in str(feedback), str(feedback)


def test_a_tagger_that_ignores_the_past_is_told_the_forward_direction_is_missing():
    class BackwardOnly(nn.Module):
        hidden: int

        @nn.compact
        def __call__(self, x, seq_lengths):
            rnn = nn.RNN(nn.GRUCell(2 * self.hidden), reverse=True, keep_order=True)
            return nn.Dense(1)(rnn(x, seq_lengths=seq_lengths))[..., 0]

    feedback = check_tagger_module(BackwardOnly)
    assert not feedback
    assert "the forward direction is missing" in str(feedback), str(feedback)


def test_an_instance_or_a_module_without_hidden_is_reported_not_raised():
    instance = check_tagger_module(_tagger()(hidden=4))
    assert not instance and "not an instance" in str(instance)

    class NoField(nn.Module):
        @nn.compact
        def __call__(self, x, seq_lengths):
            return x[..., 0]

    no_field = check_tagger_module(NoField)
    assert not no_field and "declare the field: hidden: int" in str(no_field)
    not_a_module = check_tagger_module(lambda hidden: None)
    assert not not_a_module and "a subclass of flax.linen.Module" in str(not_a_module)
