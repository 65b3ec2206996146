"""Deprecated: the ops moved to one package per op (rhea_kernels/<op>/, see rhea_kernels/__init__.py).

Kept so ``from rhea_kernels.ops import turn_scores`` (and the other public names) still works;
import them from ``rhea_kernels`` instead. The former ``cpp_*`` operators are gone: the C++
kernels are now the CPU implementations of the ops themselves (``torch.ops.rhea_kernels.<op>``).
"""
import warnings

from rhea_kernels import HAS_EXT, anchored_attention, backend_for, score_tiers, turn_scores, turn_scores_and_tiers

warnings.warn("rhea_kernels.ops is deprecated; import turn_scores, score_tiers, turn_scores_and_tiers, "
              "anchored_attention, backend_for and HAS_EXT from rhea_kernels", DeprecationWarning, stacklevel=2)

__all__ = ["HAS_EXT", "anchored_attention", "backend_for", "score_tiers", "turn_scores", "turn_scores_and_tiers"]
