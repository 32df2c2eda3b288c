"""Multi-turn environments: the Paddock `Environment` protocol, its adapters (Gymnasium,
verifiers, an HTTP server), the built-in ones, tool calls as chat templates write them, and
episodes run turn by turn above the rollout protocol (episode.py)."""

from .base import Environment, ModelTurn, Observation, Session, Toolbox
from .episode import EpisodeLimits, EpisodeRunner, EpisodeState, GroupEpisodes, GroupProgress
from .render import ChatRenderer
from .tool_calls import ToolCall, format_for_template, parse_tool_calls

__all__ = [
    "ChatRenderer",
    "Environment",
    "EpisodeLimits",
    "EpisodeRunner",
    "EpisodeState",
    "GroupEpisodes",
    "GroupProgress",
    "ModelTurn",
    "Observation",
    "Session",
    "ToolCall",
    "Toolbox",
    "format_for_template",
    "parse_tool_calls",
]
