"""Policies by name: `register_policy("name")` on a class, `get_policy("name", **kwargs)`."""
from __future__ import annotations

from rhea.constants import BENCH_POLICIES, DEFAULT_POLICY  # noqa: F401 (the registry's names)
from rhea.errors import RheaConfigError
from rhea.policies.base import ContextPolicy


class UnknownPolicyError(RheaConfigError):
    """No policy is registered under the name asked for (the message lists those that are)."""


_POLICIES: dict[str, type[ContextPolicy]] = {}

#: Modules that register more policies when imported (agents live outside rhea.context).
PLUGIN_MODULES = (
    "rhea.agents.sculptor.policy",
    "rhea.agents.ace",
    "rhea.agents.context_agent",
    "rhea.agents.acr",
    "rhea.peers.kvpress_policy",
    "rhea.peers.llmlingua_policy",
)


def _load_plugins() -> None:
    import importlib

    for module in PLUGIN_MODULES:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if not (e.name and (module == e.name or module.startswith(e.name + "."))):
                raise


def register_policy(name: str):
    """Class decorator adding a `ContextPolicy` subclass to the registry under `name`.

    >>> @register_policy("echo-doc")
    ... class Echo(ContextPolicy):
    ...     def build(self, conversation, query): ...
    >>> Echo.name, "echo-doc" in available_policies()
    ('echo-doc', True)
    """
    if not isinstance(name, str) or not name.strip():
        raise RheaConfigError(f"policy name={name!r} must be a non-empty str")

    def decorate(cls):
        if not (isinstance(cls, type) and issubclass(cls, ContextPolicy)):
            raise TypeError(f"register_policy({name!r}) decorates ContextPolicy subclasses, got {cls!r}")
        existing = _POLICIES.get(name)
        if existing is not None and existing.__qualname__ != cls.__qualname__:
            raise RheaConfigError(f"policy name {name!r} is already taken by {existing.__qualname__}; choose another name")
        cls.name = name
        _POLICIES[name] = cls
        return cls

    return decorate


def policy_class(name: str) -> type[ContextPolicy]:
    """The class registered under `name` (its class attributes say how to run it).

    >>> policy_class("recent-k").adapter
    'base'
    """
    if name not in _POLICIES:
        _load_plugins()
    if name not in _POLICIES:
        raise UnknownPolicyError(f"unknown policy {name!r}; registered: {available_policies()}")
    return _POLICIES[name]


def get_policy(name: str, **kwargs) -> ContextPolicy:
    """A new policy instance by registered name.

    >>> get_policy("recent-k", k=3).k
    3
    """
    return policy_class(name)(**kwargs)


def available_policies() -> list[str]:
    _load_plugins()
    return sorted(_POLICIES)
