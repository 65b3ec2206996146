"""Model side of rhea: `RheaForCausalLM`, its config, and offline loading."""
from rhea.modeling.config import RheaConfig
from rhea.modeling.loading import DEFAULT_MODEL, MODEL_ZOO, load_base_model, load_default_model
from rhea.modeling.rhea_model import ADAPTERS, RheaForCausalLM

__all__ = ["ADAPTERS", "DEFAULT_MODEL", "MODEL_ZOO", "RheaConfig", "RheaForCausalLM", "load_base_model", "load_default_model"]
