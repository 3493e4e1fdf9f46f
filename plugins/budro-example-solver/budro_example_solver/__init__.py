"""An exact transport solver for small dense problems (example budro plugin)."""

from budro_example_solver.solver import BreakpointSolver

__all__ = ["BreakpointSolver"]
