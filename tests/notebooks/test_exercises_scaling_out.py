"""The scaling-out chapter's checker: the rows of the global batch one process reads."""

from rnnlib.exercises.scaling_out import check_local_rows


def solution(global_batch, num_devices, process_index, process_count):
    if global_batch % num_devices:
        raise ValueError(f"a global batch of {global_batch} does not divide over {num_devices}")
    per_process = global_batch // process_count
    return process_index * per_process, (process_index + 1) * per_process


def test_the_solution_passes():
    feedback = check_local_rows(solution)
    assert feedback and "all 10 cases" in str(feedback)


def test_one_devices_block_is_told_a_process_holds_several_devices():
    def per_device(global_batch, num_devices, process_index, process_count):
        solution(global_batch, num_devices, 0, 1)  # the same divisibility check
        rows = global_batch // num_devices
        return process_index * rows, (process_index + 1) * rows

    feedback = check_local_rows(per_device)
    assert not feedback
    assert "got (0, 8); expected (0, 16) (that is one device's block" in str(feedback)


def test_a_batch_that_does_not_divide_must_raise():
    def no_check(global_batch, num_devices, process_index, process_count):
        rows = global_batch // process_count
        return process_index * rows, (process_index + 1) * rows

    feedback = check_local_rows(no_check)
    assert not feedback
    assert "must raise ValueError" in str(feedback) and "it returned (0, 5)" in str(feedback)


def test_blocks_in_the_wrong_order_are_named():
    def reversed_order(global_batch, num_devices, process_index, process_count):
        start, stop = solution(global_batch, num_devices, process_index, process_count)
        return global_batch - stop, global_batch - start

    feedback = check_local_rows(reversed_order)
    assert not feedback
    assert "from the wrong place" in str(feedback)
