"""The conversation model every policy works over: turns, plans, latents and rendering.

>>> from rhea.context import Conversation, Turn
>>> c = Conversation([Turn("hi", "hello")])
>>> len(c)
1
"""
from rhea.context.conversation import Conversation, Turn
from rhea.errors import (
    ContextOverflowError,
    ContextWindowError,
    EmptyMessageError,
    InvalidTurnError,
    MissingMemTokenError,
    PlaceholderCountError,
    SpoofedPlaceholderError,
)
from rhea.context.latent import Latent, latent_bytes, model_latent_bytes, tensor_bytes
from rhea.context.plan import ContextPlan, PlanDecisions, TokenLedger, TurnDecision
from rhea.context.rendering import FALLBACK_CHAT_TEMPLATE, RenderedBatch, RenderedContext, mem_token_id, render, render_batch
from rhea.context.budget import TokenBudget, check_message, fit_plan, fit_prompt, measure_budget, prompt_room_of

__all__ = [
    "latent_bytes", "model_latent_bytes", "tensor_bytes",
    "Conversation", "Turn", "Latent", "ContextPlan", "PlanDecisions", "TokenLedger", "TurnDecision",
    "render", "render_batch", "RenderedContext", "RenderedBatch", "mem_token_id", "FALLBACK_CHAT_TEMPLATE",
    "TokenBudget", "check_message", "fit_plan", "fit_prompt", "measure_budget", "prompt_room_of",
    "ContextOverflowError", "ContextWindowError", "EmptyMessageError", "InvalidTurnError", "MissingMemTokenError",
    "PlaceholderCountError", "SpoofedPlaceholderError",
]
