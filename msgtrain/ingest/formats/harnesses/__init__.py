"""Eval and RL harnesses: their logs and rollouts (Inspect, lm-eval, MT-Bench, tau2-bench, ToolBench, verifiers)."""
