"""Dashboard-side objects of the seed file, parsed once into frozen models.

The API only reads these objects (Canvases, campaigns, translations, integrations with their
sync history, custom attribute definitions); preference centers are seeded here and then
changed through their PUT endpoint. `parse_dashboard` takes the raw mapping of the whole seed
file, reads only its own sections and ignores every other key, so the sections live beside
the profile and key sections of the same YAML file.

Invariants of a parsed `DashboardSeed`:
- ids are unique within their kind; message variation ids and Canvas step ids are unique
  across the whole seed, so a variation id names exactly one campaign;
- every translation refers to a locale declared under `translations.locales`;
- every sync record's times parse as ISO 8601 datetimes.

A bad section raises `DashboardSeedError` naming the section and the offending key.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SECTIONS = (
    "canvases",
    "campaigns",
    "custom_attributes",
    "integrations",
    "translations",
    "preference_centers",
)

CanvasState = Literal["active", "paused", "stopped", "archived"]
JobStatus = Literal["running", "success", "partial", "error", "config_error"]
Channel = Literal["email", "push", "sms", "in_app", "webhook", "content_card", "whatsapp"]


class DashboardSeedError(ValueError):
    """A dashboard section of the seed file is malformed; the message names section and key."""


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


def parse_iso(value: str) -> datetime:
    """ISO 8601 string (a trailing `Z` allowed) → aware datetime; naive input is taken as UTC."""
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed


class Message(_Frozen):
    """A campaign message variation or a Canvas step: the unit that translations belong to.

    `translations` maps a workspace locale id to its `translation_map` (text id → text).
    `has_message: false` models a variation or step whose message was removed.
    """

    id: str = Field(min_length=1)
    name: str = ""
    channel: Channel = "email"
    multi_language: bool = True
    has_message: bool = True
    translations: dict[str, dict[str, str]] = Field(default_factory=dict)


class Canvas(_Frozen):
    """A Canvas with the state that decides whether `/canvas/trigger/send` sends it."""

    id: str = Field(min_length=1)
    name: str = ""
    state: CanvasState = "active"
    steps: tuple[Message, ...] = ()


class Campaign(_Frozen):
    """An API-triggered campaign and its message variations."""

    id: str = Field(min_length=1)
    name: str = ""
    message_variations: tuple[Message, ...] = ()


class CustomAttribute(_Frozen):
    """One custom attribute definition, exactly the record `GET /custom_attributes` returns."""

    name: str = Field(min_length=1)
    data_type: str = "String"
    description: str = ""
    status: str = "Active"
    tag_names: tuple[str, ...] = ()
    array_length: int | None = None


class SyncRecord(_Frozen):
    """One run of a warehouse integration, exactly the record `job_sync_status` returns."""

    job_status: JobStatus
    sync_start_time: str
    sync_finish_time: str | None = None
    last_timestamp_synced: str | None = None
    rows_synced: int = Field(default=0, ge=0)
    rows_failed_with_errors: int = Field(default=0, ge=0)

    @field_validator("sync_start_time", "sync_finish_time", "last_timestamp_synced")
    @classmethod
    def _iso(cls, value: str | None) -> str | None:
        if value is not None:
            parse_iso(value)
        return value

    def started(self) -> datetime:
        """The start time as an aware datetime (the sort key of a sync history)."""
        return parse_iso(self.sync_start_time)


class Integration(_Frozen):
    """A warehouse integration and its sync history, in any order (sorted when served)."""

    id: str = Field(min_length=1)
    name: str = ""
    syncs: tuple[SyncRecord, ...] = ()


class Locale(_Frozen):
    """A locale of the workspace's multi-language settings; `id` is what `locale_id` names."""

    id: str = Field(min_length=1)
    name: str
    country: str
    language: str


class Translations(_Frozen):
    """Workspace multi-language settings."""

    multi_language_enabled: bool = True
    locales: tuple[Locale, ...] = ()


class PreferenceCenter(_Frozen):
    """A preference center as seeded; `external_id` is the path parameter of its PUT."""

    external_id: str = Field(min_length=1)
    name: str
    api_id: str = Field(min_length=1)
    title: str | None = None
    page_html: str = "<html></html>"
    confirmation_html: str = "<html></html>"
    state: Literal["active", "draft"] = "active"
    created_at: str = "2024-01-01T00:00:00+00:00"
    updated_at: str = "2024-01-01T00:00:00+00:00"


class DashboardSeed(_Frozen):
    """All dashboard-side objects of one seed file."""

    canvases: tuple[Canvas, ...] = ()
    campaigns: tuple[Campaign, ...] = ()
    custom_attributes: tuple[CustomAttribute, ...] = ()
    integrations: tuple[Integration, ...] = ()
    translations: Translations = Translations()
    preference_centers: tuple[PreferenceCenter, ...] = ()

    def canvas(self, canvas_id: str) -> Canvas | None:
        """The Canvas with this id, or None."""
        return next((c for c in self.canvases if c.id == canvas_id), None)

    def campaign(self, campaign_id: str) -> Campaign | None:
        """The campaign with this id, or None."""
        return next((c for c in self.campaigns if c.id == campaign_id), None)

    def integration(self, integration_id: str) -> Integration | None:
        """The integration with this id, or None."""
        return next((i for i in self.integrations if i.id == integration_id), None)

    def locale(self, locale_id: str) -> Locale | None:
        """The workspace locale with this id, or None."""
        return next((loc for loc in self.translations.locales if loc.id == locale_id), None)

    def variation_owner(self, variation_id: str) -> tuple[Campaign, Message] | None:
        """The campaign holding this message variation id, and the variation; or None."""
        for campaign in self.campaigns:
            for variation in campaign.message_variations:
                if variation.id == variation_id:
                    return campaign, variation
        return None


def _unique(section: str, ids: list[str]) -> None:
    seen: set[str] = set()
    for item_id in ids:
        if item_id in seen:
            raise DashboardSeedError(f"seed section {section!r}: duplicate id {item_id!r}")
        seen.add(item_id)


def _check(seed: DashboardSeed) -> None:
    _unique("canvases", [c.id for c in seed.canvases])
    _unique("campaigns", [c.id for c in seed.campaigns])
    _unique("custom_attributes", [a.name for a in seed.custom_attributes])
    _unique("integrations", [i.id for i in seed.integrations])
    _unique("translations.locales", [loc.id for loc in seed.translations.locales])
    _unique("preference_centers", [p.external_id for p in seed.preference_centers])
    messages = [s for c in seed.canvases for s in c.steps]
    messages += [v for c in seed.campaigns for v in c.message_variations]
    _unique("campaigns/canvases (variation and step ids)", [m.id for m in messages])
    known = {loc.id for loc in seed.translations.locales}
    for message in messages:
        for locale_id in message.translations:
            if locale_id not in known:
                raise DashboardSeedError(
                    f"seed message {message.id!r}: translation locale {locale_id!r} is not "
                    "declared under translations.locales"
                )


def parse_dashboard(raw: Mapping[str, Any] | None) -> DashboardSeed:
    """Parse the dashboard sections of a raw seed mapping; other keys are ignored.

    A top-level `multi_language_enabled` is accepted as well as the same key under
    `translations` (the top-level one wins). Raises `DashboardSeedError` on a malformed
    section, a duplicate id or an unknown locale.
    """
    sections = {key: raw[key] for key in SECTIONS if raw and raw.get(key) is not None}
    if raw and isinstance(raw.get("multi_language_enabled"), bool):
        translations = sections.get("translations")
        merged = dict(translations) if isinstance(translations, Mapping) else {}
        merged["multi_language_enabled"] = raw["multi_language_enabled"]
        sections["translations"] = merged
    try:
        seed = DashboardSeed.model_validate(sections)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        raise DashboardSeedError(
            f"seed key {where!r}: {first['msg']} ({exc.error_count()} error(s) in all)"
        ) from exc
    _check(seed)
    return seed


def seed_of(app: Any) -> DashboardSeed:
    """The dashboard seed of a running sandbox app, parsed from `seed.raw` on first use.

    Cached in the sandbox's per-module `extra` state (cleared on reset, then parsed again).
    """
    return _parsed(app.state.sandbox)


def attribute_definitions(sandbox: Any) -> dict[str, CustomAttribute]:
    """The seed's custom attribute definitions by name, of a `SandboxState` (cached as
    `seed_of` caches the seed). A seed whose dashboard sections do not parse defines none
    here: /users/track then drops nothing, and the dashboard endpoints say what is wrong."""
    cached = sandbox.extra.get("attribute_definitions")
    if not isinstance(cached, dict):
        try:
            cached = {a.name: a for a in _parsed(sandbox).custom_attributes}
        except DashboardSeedError:
            cached = {}
        sandbox.extra["attribute_definitions"] = cached
    return cached


def _parsed(sandbox: Any) -> DashboardSeed:
    cached = sandbox.extra.get("dashboard_seed")
    if not isinstance(cached, DashboardSeed):
        cached = parse_dashboard(sandbox.seed.raw)
        sandbox.extra["dashboard_seed"] = cached
    return cached
