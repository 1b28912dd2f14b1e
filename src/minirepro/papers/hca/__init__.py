"""HCA (paper 3): explaining nonlinear MPC moves by hierarchical causal abduction.

One file per concern:

* ``plants``        greenhouse, building-HVAC and CSTR plants, designed scenarios
* ``mpc``           casadi/IPOPT NMPC with the multipliers of every constraint
* ``evidence``      knowledge graph, KKT evidence, PCMCI (tigramite)
* ``ranking``       HCA's ranking-and-validation, KKT-threshold calibration
* ``oracle``        interventional and design oracles (ground truth)
* ``lime_baseline`` LIME on the NMPC as a black box
* ``shap_baseline`` KernelSHAP on the NMPC as a black box
* ``experiment``    closed-loop runs, accuracies, costs
* ``plots``         the chapter's figures
"""

from minirepro.papers.hca.evidence import (
    MoveContext,
    kg_evidence,
    kkt_evidence,
    knowledge_graph,
    pcmci_evidence,
    pcmci_pvalues,
)
from minirepro.papers.hca.experiment import (
    METHODS,
    ORACLES,
    Config,
    accuracy_table,
    correct_per_move,
    cost_ratios,
    costs,
    mcnemar_moves,
    mcnemar_power,
    mean_accuracy,
    move_table,
    one_move,
    oracle_agreement,
    per_seed_accuracy,
    pooled_taus,
    run_domain,
    run_experiment,
    summarise,
)
from minirepro.papers.hca.lime_baseline import lime_explain
from minirepro.papers.hca.mpc import NMPC, MPCInfeasibleError, MPCProblem, MPCSolution
from minirepro.papers.hca.oracle import design_oracle, interventional_oracle
from minirepro.papers.hca.plants import (
    PLANTS,
    building_hvac,
    cstr,
    get_plant,
    greenhouse,
    make_schedule,
)
from minirepro.papers.hca.ranking import Evidence, HCAParams, calibrate_tau, rank_and_validate
from minirepro.papers.hca.shap_baseline import shap_explain

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("mpc", "evidence", "ranking", "lime_baseline", "shap_baseline")

__all__ = [
    "METHODS", "NMPC", "ORACLES", "PLANTS", "Config", "Evidence", "HCAParams", "MPCInfeasibleError",
    "MPCProblem", "MPCSolution", "MoveContext", "accuracy_table", "building_hvac", "calibrate_tau", "cstr",
    "correct_per_move", "cost_ratios", "costs", "mcnemar_moves", "mcnemar_power", "move_table", "pooled_taus",
    "shap_explain", "design_oracle", "get_plant", "greenhouse", "interventional_oracle", "kg_evidence",
    "kkt_evidence", "knowledge_graph", "lime_explain", "make_schedule", "mean_accuracy",
    "one_move", "oracle_agreement", "pcmci_evidence", "per_seed_accuracy", "pcmci_pvalues", "rank_and_validate", "run_domain",
    "run_experiment", "summarise",
]
