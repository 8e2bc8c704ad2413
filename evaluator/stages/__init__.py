"""The stages of one evaluation in the child, in order: build, correctness, strict trials, timing
(and `problem_check`, the child of `kb-agent problems check`). Each is `run(ev)` over an
`evaluator.context.Evaluation`, recording facts and raising `Verdict` to end early."""
