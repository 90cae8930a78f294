"""The loop every checker shares: run the attempt on each case, judge it, report in words."""

from rnnlib.exercises._check import Feedback, case_problems, run_cases


def _double(x):
    return 2 * x


def _judge_double(got, x):
    return None if got == 2 * x else f"got {got}; expected {2 * x}"


def test_a_right_attempt_passes_every_case():
    feedback = run_cases("check_double", _double, [("one", (1,)), ("two", (2,))], _judge_double)
    assert feedback == Feedback("check_double", 2, ())
    assert str(feedback) == "✔ check_double: all 2 cases match the reference."


def test_a_judges_problem_is_prefixed_with_its_case_name():
    cases = [("one", (1,)), ("two", (2,)), ("three", (3,))]
    feedback = run_cases("check_double", lambda x: 2 * x if x != 2 else 5, cases, _judge_double)
    assert not feedback
    assert feedback.cases == 3
    assert feedback.problems == ("case 'two': got 5; expected 4",)


def test_an_attempt_that_raises_is_reported_with_the_case_and_the_exception_type():
    judged = []

    def judge(got, x):
        judged.append(x)
        return None

    def attempt_fn(x):
        if x == 2:
            raise NotImplementedError("write it")
        return 2 * x

    feedback = run_cases("check_double", attempt_fn, [("one", (1,)), ("two", (2,))], judge)
    assert feedback.problems == ("case 'two': calling it raised NotImplementedError: write it",)
    assert judged == [1]  # a case whose attempt raised is not judged


def test_the_judge_gets_the_result_the_arguments_and_the_cases_extras():
    seen = []

    def judge(got, a, b, want):
        seen.append((got, a, b, want))
        return None if got == want else "wrong"

    cases = [("sum", (2, 3), 5), ("another sum", (1, 1), 3)]
    problems = case_problems(lambda a, b: a + b, cases, judge)
    assert seen == [(5, 2, 3, 5), (2, 1, 1, 3)]
    assert problems == ["case 'another sum': wrong"]


def test_cases_may_come_from_a_generator_and_are_all_counted():
    cases = ((f"x = {x}", (x,)) for x in range(4))
    feedback = run_cases("check_double", lambda x: x, cases, _judge_double)
    assert feedback.cases == 4
    assert len(feedback.problems) == 3  # x = 0 is right even for the identity
    assert str(feedback).startswith("✘ check_double: 3 problem(s).\n  - case 'x = 1': got 1;")


def test_compare_appends_the_explanation_only_when_the_results_differ():
    from rnnlib.exercises._check import compare

    calls = []

    def explain():
        calls.append(1)
        return " (a hint)"

    assert compare("x", [1.0, 2.0], [1.0, 2.0], explain=explain) is None
    assert calls == []
    problem = compare("x", [1.0, 3.0], [1.0, 2.0], explain=explain)
    assert problem.startswith("x[1] is 3; expected 2") and problem.endswith(" (a hint)")
