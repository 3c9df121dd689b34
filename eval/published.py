"""Figures of the published work (Lohoff & Neftci, NeurIPS 2024), as reconstructed in
``shared/benchmarks.md`` section 3: multiplications under its cost model."""

#: task -> (intermediates, forward, reverse, min. Markowitz, PPO, AlphaZero per task)
PUBLISHED = {
    "RoeFlux_1d": (98, 620, 364, 407, 326, 320),
    "RoeFlux_3d": (143, 1556, 979, 938, 877, 811),
    "RobotArm_6DOF": (108, 397, 301, 288, 247, 231),
    "HumanHeartDipole": (78, 240, 172, 194, 161, 148),
    "PropaneCombustion": (51, 151, 90, 111, 92, 88),
    "BlackScholes_Jacobian": (129, 545, 572, 350, 308, 312),
    "RandomG": (85, 632, 566, 451, 422, 417),
    "RandomF": (75, 17728, 9333, 12083, 6313, 6374),
    "MLP": (38, 10930, 392, 4796, 422, 389),
    "Encoder": (90, 135010, 4688, 51869, 5741, 4656),
}
