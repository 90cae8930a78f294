"""The deep RNNs chapter's checkers accept the solutions and explain plausible mistakes."""

import jax
import jax.numpy as jnp
import numpy as np

from rnnlib.exercises.deep_rnns import check_layer_norm, check_recurrent_mask, check_stack


def stack(x, layers, dropout):
    for index, layer in enumerate(layers):
        x = layer(x)
        if index < len(layers) - 1:
            x = dropout(x)
    return x


def test_the_stack_solution_passes():
    feedback = check_stack(stack)
    assert feedback, str(feedback)
    assert "✔ check_stack: all 3 cases" in str(feedback)


def test_dropout_after_the_last_layer_too_is_named():
    def every_layer(x, layers, dropout):
        for layer in layers:
            x = dropout(layer(x))
        return x

    feedback = check_stack(every_layer)
    assert not feedback
    text = str(feedback)
    assert "case 'one layer': dropout was called 1 time(s)" in text
    assert "drops 0 time(s)" in text
    assert "applied after the last layer too" in text


def test_dropout_on_the_input_is_named():
    def before_each(x, layers, dropout):
        for index, layer in enumerate(layers):
            if index < len(layers) - 1 or len(layers) == 1:
                x = dropout(x)
            x = layer(x)
        return x

    text = str(check_stack(before_each))
    assert "applied to the stack's input x" in text
    assert "dropout goes after a layer, not before" in text


def test_layers_in_the_wrong_order_or_no_dropout_fail_with_a_value_or_count():
    def no_dropout(x, layers, dropout):
        for layer in layers:
            x = layer(x)
        return x

    text = str(check_stack(no_dropout))
    assert "case 'two layers': dropout was called 0 time(s)" in text


def recurrent_mask(key, batch, steps, features, rate):
    mask = jax.random.bernoulli(key, 1.0 - rate, (batch, features))
    return jnp.broadcast_to(mask, (steps, batch, features))


def test_the_recurrent_mask_solution_passes():
    feedback = check_recurrent_mask(recurrent_mask)
    assert feedback, str(feedback)
    assert "✔ check_recurrent_mask: all 2 cases" in str(feedback)


def test_a_new_mask_every_step_is_named():
    def every_step(key, batch, steps, features, rate):
        return jax.random.bernoulli(key, 1.0 - rate, (steps, batch, features))

    text = str(check_recurrent_mask(every_step))
    assert "the mask at step 1 differs from step 0" in text
    assert "not a new mask every step" in text


def test_one_mask_for_the_whole_batch_is_named():
    def one_for_all(key, batch, steps, features, rate):
        mask = jax.random.bernoulli(key, 1.0 - rate, (features,))
        return jnp.broadcast_to(mask, (steps, batch, features))

    assert "every sequence of the batch got the same mask" in str(check_recurrent_mask(one_for_all))


def test_rate_used_as_the_keep_probability_is_named():
    def keep_rate(key, batch, steps, features, rate):
        mask = jax.random.bernoulli(key, rate, (batch, features))
        return jnp.broadcast_to(mask, (steps, batch, features))

    text = str(check_recurrent_mask(keep_rate))
    assert "of the units are kept; expected about 80%" in text
    assert "you keep a unit with probability rate" in text


def test_a_rate_written_into_the_code_is_named():
    def always_80(key, batch, steps, features, rate):
        mask = jax.random.bernoulli(key, 0.8, (batch, features))
        return jnp.broadcast_to(mask, (steps, batch, features))

    text = str(check_recurrent_mask(always_80))
    assert "rate 0.5': 80% of the units are kept; expected about 50%" in text


def test_batch_and_steps_swapped_is_named_by_the_shape():
    def batch_first(key, batch, steps, features, rate):
        mask = jax.random.bernoulli(key, 1.0 - rate, (batch, 1, features))
        return jnp.broadcast_to(mask, (batch, steps, features))

    text = str(check_recurrent_mask(batch_first))
    assert "the mask has shape (2000, 3, 16); expected (3, 2000, 16)" in text


def test_a_scaled_float_mask_is_named_by_its_dtype():
    def floats(key, batch, steps, features, rate):
        return recurrent_mask(key, batch, steps, features, rate) / (1 - rate)

    assert "has dtype float32; expected bool" in str(check_recurrent_mask(floats))


def layer_norm(z, scale, bias):
    mean = jnp.mean(z, axis=-1, keepdims=True)
    variance = jnp.var(z, axis=-1, keepdims=True)
    return (z - mean) / jnp.sqrt(variance + 1e-6) * scale + bias


def test_the_layer_norm_solution_passes():
    feedback = check_layer_norm(layer_norm)
    assert feedback, str(feedback)
    assert "✔ check_layer_norm: all 3 cases" in str(feedback)


def test_a_numpy_layer_norm_with_epsilon_outside_the_root_passes_too():
    # (z - mean) / (std + eps) differs from nn.LayerNorm by far less than the tolerance.
    def outside(z, scale, bias):
        std = np.std(z, axis=-1, keepdims=True)
        return (z - np.mean(z, axis=-1, keepdims=True)) / (std + 1e-6) * scale + bias

    assert check_layer_norm(outside)


def test_normalising_over_the_batch_is_named_batch_normalisation():
    def over_batch(z, scale, bias):
        mean = jnp.mean(z, axis=0, keepdims=True)
        variance = jnp.var(z, axis=0, keepdims=True)
        return (z - mean) / jnp.sqrt(variance + 1e-6) * scale + bias

    feedback = check_layer_norm(over_batch)
    assert not feedback
    text = str(feedback)
    assert "✘ check_layer_norm: 3 problem(s)" in text
    assert "normalised over its first axis, across the batch: that is batch normalisation" in text


def test_a_fixed_axis_fails_only_with_several_batch_dims_and_is_named():
    def axis_one(z, scale, bias):
        mean = jnp.mean(z, axis=1, keepdims=True)
        variance = jnp.var(z, axis=1, keepdims=True)
        return (z - mean) / jnp.sqrt(variance + 1e-6) * scale + bias

    text = str(check_layer_norm(axis_one))
    assert "1 problem(s)" in text
    assert "case 'z (2, 3, 5, 6): batch dims (2, 3), 5 steps'" in text
    assert "normalised over axis 1, the last one only when z has one batch dim" in text


def test_no_epsilon_is_named_by_the_step_of_equal_features():
    def no_epsilon(z, scale, bias):
        mean = jnp.mean(z, axis=-1, keepdims=True)
        return (z - mean) / jnp.sqrt(jnp.var(z, axis=-1, keepdims=True)) * scale + bias

    text = str(check_layer_norm(no_epsilon))
    assert "1 problem(s)" in text
    assert "case 'z (3, 8), whose first row is all 2.5': the output is nan at [0]" in text
    assert "add epsilon (1e-6) to the variance inside the square root" in text


def test_the_sample_variance_is_named():
    def sample_variance(z, scale, bias):
        variance = np.var(z, axis=-1, keepdims=True, ddof=1)
        return (z - np.mean(z, axis=-1, keepdims=True)) / np.sqrt(variance + 1e-6) * scale + bias

    assert "divided by the number of features minus 1 (ddof=1)" in str(
        check_layer_norm(sample_variance)
    )


def test_a_missing_mean_or_missing_and_swapped_parameters_are_named():
    def normalised(z):
        mean = jnp.mean(z, axis=-1, keepdims=True)
        return (z - mean) / jnp.sqrt(jnp.var(z, axis=-1, keepdims=True) + 1e-6)

    def not_centred(z, scale, bias):
        return z / jnp.sqrt(jnp.var(z, axis=-1, keepdims=True) + 1e-6) * scale + bias

    assert "without subtracting its mean first" in str(check_layer_norm(not_centred))
    no_parameters = str(check_layer_norm(lambda z, scale, bias: normalised(z)))
    assert "neither multiplied by scale nor shifted by bias" in no_parameters
    swapped = str(check_layer_norm(lambda z, scale, bias: normalised(z) * bias + scale))
    assert "scale and bias are swapped" in swapped


def test_a_wrong_shape_and_an_attempt_that_raises_are_reported():
    shape = str(check_layer_norm(lambda z, scale, bias: layer_norm(z, scale, bias)[..., 0]))
    assert "case 'z (3, 8)': the output has shape (3,); expected (3, 8)" in shape

    def raises(z, scale, bias):
        raise ValueError("not written yet")

    assert "calling it raised ValueError: not written yet" in str(check_layer_norm(raises))
