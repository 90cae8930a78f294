"""The old-API chapter's checker: an old initialize_carry call ported to the new one."""

from rnnlib.exercises.old_api import check_port


def solution(batch_dims, size, channels, kernel_size):
    signal = () if kernel_size is None else tuple(size[:-1])
    return tuple(batch_dims) + signal + (channels,)


def test_the_solution_passes():
    feedback = check_port(solution)
    assert feedback and "all 4 cases" in str(feedback)


def test_passing_the_old_size_as_the_last_axis_is_explained():
    def old_size(batch_dims, size, channels, kernel_size):
        return tuple(batch_dims) + ((size,) if kernel_size is None else tuple(size))

    feedback = check_port(old_size)
    assert not feedback
    assert "got (16, 64); expected (16, 3)" in str(feedback)
    assert "its last axis is the input's channels" in str(feedback)


def test_dropping_a_convlstms_signal_dims_is_caught_by_running_the_new_call():
    feedback = check_port(lambda batch_dims, size, channels, kernel_size: (*batch_dims, channels))
    assert not feedback
    assert "builds a carry of shape (5, 8); the old call built (5, 16, 8)" in str(feedback)
    assert "keeps its signal dims" in str(feedback)
