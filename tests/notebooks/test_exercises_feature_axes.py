"""The feature-axes chapter's checker: a ConvLSTM carry shape worked out from the rule."""

from rnnlib.exercises.feature_axes import check_carry_shape


def solution(input_shape, kernel_size, features):
    return tuple(input_shape[:-1]) + (features,)


def test_the_solution_passes():
    feedback = check_carry_shape(solution)
    assert feedback and "all 5 cases" in str(feedback)


def test_keeping_the_input_channels_is_named():
    feedback = check_carry_shape(lambda shape, kernel_size, features: tuple(shape))
    assert not feedback
    assert "got (2, 8, 8, 3); expected (2, 8, 8, 6)" in str(feedback)
    assert "the cell's features, not the input's channels" in str(feedback)


def test_dropping_the_signal_dims_is_named():
    feedback = check_carry_shape(lambda shape, kernel_size, features: (shape[0], features))
    assert not feedback
    assert "the signal dims are kept" in str(feedback)


def test_assuming_one_batch_dim_is_told_how_many_there_are():
    def one_batch_dim(shape, kernel_size, features):
        return (shape[0], *shape[-len(kernel_size) - 1 : -1], features)

    feedback = check_carry_shape(one_batch_dim)
    assert not feedback
    assert "there are 2 batch dims here" in str(feedback)
    assert "there are 0 batch dims here" in str(feedback)


def test_a_non_tuple_answer_is_reported():
    feedback = check_carry_shape(lambda shape, kernel_size, features: "(2, 8, 8, 6)")
    assert not feedback
    assert "return a tuple of ints" in str(feedback)


def test_flax_linens_own_carry_passes_its_checker():
    # The reference is flax.linen's ConvLSTMCell: asking it for the carry passes.
    import flax.linen as nn
    import jax

    def from_flax(shape, kernel_size, features):
        cell = nn.ConvLSTMCell(features=features, kernel_size=kernel_size)
        return cell.initialize_carry(jax.random.key(0), shape)[0].shape

    feedback = check_carry_shape(from_flax)
    assert feedback, str(feedback)
