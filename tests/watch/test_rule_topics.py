"""The rules live in modules by what they are about (``watch/rules_*.py``) and are tried
in the one order ``watch/matching.py`` lists. A rule written in a topic module but left
out of that order would never match anything, silently: each is in it exactly once."""

from __future__ import annotations

import pkgutil
from importlib import import_module

import statewarden.watch
from statewarden.watch.rule import Rule
from statewarden.watch.rules import RULES


def topic_rules() -> dict[str, list[Rule]]:
    """Each ``watch/rules_*`` module -> the rules it defines at its top level."""
    out: dict[str, list[Rule]] = {}
    for info in pkgutil.iter_modules(statewarden.watch.__path__):
        if info.name.startswith("rules_"):
            module = import_module(f"statewarden.watch.{info.name}")
            out[info.name] = [v for v in vars(module).values() if isinstance(v, Rule)]
    return out


def left_out(topics: dict[str, list[Rule]], order: tuple[Rule, ...]) -> list[str]:
    """The rules of ``topics`` not in ``order`` exactly once, and those of ``order`` that
    no topic defines, as ``module: name``."""
    defined = [(module, rule) for module, rules in topics.items() for rule in rules]
    out = [f"{module}: {rule.name}" for module, rule in defined if order.count(rule) != 1]
    known = [rule for _module, rule in defined]
    out += [f"(no topic): {rule.name}" for rule in order if rule not in known]
    return out


def test_every_topic_rule_is_tried_once_in_the_order() -> None:
    """Every rule the topic modules define is in RULES once, and RULES holds no other."""
    topics = topic_rules()
    assert set(topics) >= {
        "rules_corruption",
        "rules_wal",
        "rules_holders",
        "rules_repair",
        "rules_delivery",
    }
    assert all(topics.values()), topics
    assert left_out(topics, RULES) == []


def test_rule_names_are_distinct() -> None:
    """A signal names its rule (``fields["rule"]``): no two rules share a name."""
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)


def test_the_check_names_a_rule_left_out_and_one_listed_twice() -> None:
    """The check above is not vacuous: a rule missing from the order, one listed twice and
    one no topic defines are each named."""
    a, b, c = RULES[0], RULES[1], RULES[2]
    topics = {"rules_x": [a, b]}
    assert left_out(topics, (a,)) == ["rules_x: " + b.name]
    assert left_out(topics, (a, b, b)) == ["rules_x: " + b.name]
    assert left_out(topics, (a, b, c)) == ["(no topic): " + c.name]
