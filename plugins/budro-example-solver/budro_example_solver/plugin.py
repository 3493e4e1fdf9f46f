"""Hook implementations: what budro loads through the "budro" entry-point group."""

import budro

from budro_example_solver.solver import BreakpointSolver


@budro.hookimpl
def budro_solvers():
    yield budro.SolverPlugin(
        name="example-breakpoints",
        factory=BreakpointSolver,
        description="Exact: the Lagrangian's breakpoints searched by bisection, two greedy plans mixed to meet the "
                    "budget (dense costs, n <= max_n; an example plugin).",
        # closed set: budro.plugin_types.SOLVER_CAPABILITIES.  No "sparse-cost" (budro then refuses
        # n_neighbors with this solver) and no "warm-start" (budro passes no eta0).
        capabilities={"exact", "dense-cost"},
    )
