"""TGSE training of ACR's router and refactorer adapters (``rhea train-acr``).

- `config`: `TGSEConfig`, every setting (the YAML keys);
- `rewards`: how the solver's answer is scored (`exact_match`, `value_match`);
- `tgse`: the loop itself (`TGSE`), its instances and result;
- `cli`: the ``rhea train-acr`` command.
"""
from rhea.training.acr.config import POOLS, TGSEConfig
from rhea.training.acr.rewards import REWARDS, exact_match, get_reward, normalize_answer, value_match
from rhea.training.acr.tgse import (MIN_POOL_FOR_VALIDATION, STATE_FILE, TGSE, Instance, TGSEResult, clear_output,
                                    teacher_from_spec)

__all__ = ["TGSEConfig", "POOLS", "REWARDS", "exact_match", "value_match", "get_reward", "normalize_answer", "TGSE",
           "Instance", "TGSEResult", "STATE_FILE", "MIN_POOL_FOR_VALIDATION", "clear_output", "teacher_from_spec"]
