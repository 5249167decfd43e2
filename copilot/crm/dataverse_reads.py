"""The copilot's own reads on Dynamics 365 Sales: :class:`~copilot.crm.reads.CrmReads` over the
Dataverse Web API v9.2, with the rep's on-behalf-of token (the writer's HTTP plumbing).

Dataverse's MCP tools are for the model, discovered at run time and never named in code; the
briefs, the digest and the stats card read fixed things, so they use the Web API, where a row
the rep may not read simply drops out of every query (the CRM's security, not the copilot's):

* the rep: ``WhoAmI`` → ``systemusers(<UserId>)`` (manager: ``_parentsystemuserid_value``; direct
  reports: the users whose ``_parentsystemuserid_value`` is the rep; ``azureactivedirectoryobjectid``
  links each to Entra);
* accounts, ``contacts`` of an account (``_parentcustomerid_value``), open ``opportunities``
  (``statecode eq 0`` with ``_parentaccountid_value`` or ``_ownerid_value``), closed ones
  (``statecode`` 1 Won or 2 Lost, with ``actualclosedate`` or ``modifiedon`` since the moment),
  ``activitypointers`` regarding an account or its deals (``_regardingobjectid_value``, canceled
  ones left out) with their contact parties (``activity_pointer_activity_parties``, named from
  the rep's readable ``contacts``);
* each row mapped to the copilot's field names (:mod:`copilot.crm.reads`), its GUID as its id,
  its stage as the stage's label (a won or lost deal's as the copilot's Won / Lost stage, from
  ``statecode``; a close in the audit history likewise), its ETag's row version as ``version``.

Ids that go into a query or a path are checked to be GUIDs first: an id can come from a model's
proposal (the digest reads a waiting proposal's target), and must never reshape a query.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any, Final, assert_never

import httpx

from copilot.crm.dataverse import (
    DataverseConfig,
    DataverseWriter,
    TokenSource,
    load_vocabulary,
    refusal,
    version_of,
)
from copilot.crm.reads import Record
from copilot.crm.types import TargetKind
from copilot.errors import CrmCallError
from copilot.vocabulary import LOST_STAGE, WON_STAGE, Vocabulary, current_vocabulary, vocabulary_loaded

PAGE: Final = 100
"""Rows per page (``Prefer: odata.maxpagesize``)."""
MAX_PAGES: Final = 20
"""At most this many pages of one listing (2,000 rows): a bound, as the reference CRM's paging has."""
CANCELED: Final = 2
"""``statecode`` of a canceled (voided) activity."""
CLOSED_STAGE: Final[dict[int, str]] = {1: WON_STAGE, 2: LOST_STAGE}
"""An opportunity's ``statecode`` (1 Won, 2 Lost) → the copilot's stage for it."""
CONTACT_BATCH: Final = 50
"""Contact ids per query when naming activity parties (a bound on the URL's length)."""
PARTIES: Final = "activity_pointer_activity_parties"
"""The activity-party collection of ``activitypointers`` (each party's ``_partyid_value``)."""
LOOKUP_TABLE: Final = "_partyid_value@Microsoft.Dynamics.CRM.lookuplogicalname"
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_USER_SELECT: Final = (
    "systemuserid",
    "fullname",
    "azureactivedirectoryobjectid",
    "_parentsystemuserid_value",
)
_ACTIVITY_SELECT: Final = (
    "activityid",
    "subject",
    "description",
    "activitytypecode",
    "actualend",
    "scheduledstart",
    "scheduledend",
    "createdon",
    "_regardingobjectid_value",
    "statecode",
)


def guid(record_id: str) -> str:
    """``record_id`` if it is a GUID, else ``not_found`` (no Dataverse row has another id)."""
    if not isinstance(record_id, str) or not _GUID.match(record_id):
        raise CrmCallError("not_found", f"{record_id!r} is not a Dataverse record id", {"id": record_id})
    return record_id.lower()


def _instant(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _known_stage_before(versions: list[Record]) -> None:
    """Fill a stage change's missing old stage (an audit of a close records the state, and the
    sales stage only if it changed too) from the stage the deal had before, where known."""
    stage: Any = None
    for version in versions:
        for change in version["changes"]:
            if change["field"] != "stage":
                continue
            if change["old"] is None and stage is not None and version["operation"] == "update":
                change["old"] = stage
            stage = change["new"]


class DataverseReads:
    """:class:`~copilot.crm.reads.CrmReads` on Dataverse, as one rep."""

    def __init__(
        self,
        config: DataverseConfig,
        token: TokenSource,
        crm: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
    ):
        """``crm``: the key the process keeps this CRM's vocabulary under
        (:func:`copilot.vocabulary.crm_identity`), to reuse it when an agent has loaded it."""
        self._config = config
        self._token = token
        self._crm = crm
        self._transport = transport
        self._web: DataverseWriter | None = None
        self._me: Record | None = None

    async def _api(self) -> DataverseWriter:
        """The writer's HTTP plumbing and row mapping, with the CRM's stage labels (the process's
        vocabulary if it was read from this CRM, else read once now, for this reader)."""
        if self._web is None:
            vocabulary: Vocabulary = (
                current_vocabulary()
                if vocabulary_loaded(self._crm)
                else await load_vocabulary(self._config, self._token, transport=self._transport)
            )
            self._web = DataverseWriter(self._config, self._token, vocabulary, transport=self._transport)
        return self._web

    def _set(self, logical_name: str) -> str:
        return self._config.entity_set(logical_name)

    async def _one(self, path: str, select: tuple[str, ...], expand: str | None = None) -> Record:
        web = await self._api()
        return await web.get_row(path, select, expand)

    async def _rows(
        self,
        logical_name: str,
        select: tuple[str, ...],
        *,
        where: str | None = None,
        orderby: str | None = None,
        expand: str | None = None,
        lookup_tables: bool = False,
    ) -> list[Record]:
        """Every row of a query, following ``@odata.nextLink`` (only back to this environment);
        ``lookup_tables``: with each lookup's table (Dataverse annotates it only when asked)."""
        web = await self._api()
        query = {"$select": ",".join(select)}
        if where:
            query["$filter"] = where
        if orderby:
            query["$orderby"] = orderby
        if expand:
            query["$expand"] = expand
        params: dict[str, str] | None = query
        path = self._set(logical_name)
        rows: list[Record] = []
        prefer = f"odata.maxpagesize={PAGE}"
        if lookup_tables:
            prefer += ',odata.include-annotations="Microsoft.Dynamics.CRM.lookuplogicalname"'
        for _ in range(MAX_PAGES):
            response = await web.send("GET", path, params=params, headers={"Prefer": prefer})
            if response.status_code != 200:
                raise refusal(response)
            body = response.json()
            rows += [r for r in body.get("value") or [] if isinstance(r, dict)]
            next_link = body.get("@odata.nextLink")
            prefix = self._config.base_url + "/"
            if not isinstance(next_link, str) or not next_link.startswith(prefix):
                # No more pages; a link elsewhere is not followed (the rep's token stays here).
                break
            path, params = next_link[len(prefix) :], None
        return rows

    # --- the rep ---------------------------------------------------------------------------------

    @staticmethod
    def _user(row: Record) -> Record:
        return {
            "id": row.get("systemuserid"),
            "name": row.get("fullname") or "",
            "role": "",
            "aad_object_id": row.get("azureactivedirectoryobjectid") or None,
        }

    async def me(self) -> Record:
        """``WhoAmI``, the rep's ``systemuser``, their manager's and their direct reports'."""
        if self._me is not None:
            return self._me
        web = await self._api()
        response = await web.send("GET", "WhoAmI")
        if response.status_code != 200:
            raise refusal(response)
        user_id = guid(str(response.json().get("UserId") or ""))
        row = await self._one(f"{self._set('systemuser')}({user_id})", _USER_SELECT)
        manager_id = row.get("_parentsystemuserid_value")
        manager = None
        if isinstance(manager_id, str) and manager_id:
            try:
                manager = self._user(
                    await self._one(f"{self._set('systemuser')}({guid(manager_id)})", _USER_SELECT)
                )
            except CrmCallError:
                manager = None  # a manager the rep may not read: named nowhere
        reports = await self._rows(
            "systemuser", _USER_SELECT, where=f"_parentsystemuserid_value eq {user_id}", orderby="fullname"
        )
        self._me = {
            **self._user(row),
            "manager": manager,
            "direct_reports": [self._user(r) for r in reports],
        }
        return self._me

    # --- accounts and contacts -------------------------------------------------------------------

    @staticmethod
    def _account(row: Record) -> Record:
        account: Record = {"id": row.get("accountid"), "name": row.get("name") or ""}
        if row.get("address1_city"):
            account["city"] = row["address1_city"]
        account["version"] = version_of(row.get("@odata.etag"))
        return account

    async def accounts(self) -> list[Record]:
        """``accounts`` the rep can read, by name."""
        rows = await self._rows("account", ("accountid", "name"), orderby="name")
        return [self._account(r) for r in rows]

    async def account(self, account_id: str) -> Record:
        """``accounts(<id>)``: name and city (Dynamics 365's industry is a per-tenant option set,
        so it is not assumed)."""
        row = await self._one(
            f"{self._set('account')}({guid(account_id)})", ("accountid", "name", "address1_city")
        )
        return self._account(row)

    @staticmethod
    def _contact(row: Record) -> Record:
        return {
            "id": row.get("contactid"),
            "name": row.get("fullname") or "",
            "title": row.get("jobtitle") or "",
            "email": row.get("emailaddress1") or "",
            "account_id": row.get("_parentcustomerid_value"),
            "created_at": row.get("createdon"),
        }

    async def contacts(self, account_id: str) -> list[Record]:
        """The account's ``contacts`` (no phone number is read: matching needs the address only)."""
        rows = await self._rows(
            "contact",
            ("contactid", "fullname", "jobtitle", "emailaddress1", "_parentcustomerid_value", "createdon"),
            where=f"_parentcustomerid_value eq {guid(account_id)}",
            orderby="fullname",
        )
        return [self._contact(r) for r in rows]

    # --- opportunities ---------------------------------------------------------------------------

    async def _opportunity_select(self) -> tuple[tuple[str, ...], str | None]:
        web = await self._api()
        select, expand = web._select("opportunity")
        key = self._config.key_column
        return (
            *(c for c in select if c != key),
            "_parentaccountid_value",
            "_ownerid_value",
            "statecode",
            "actualclosedate",
        ), expand

    async def _opportunity(self, row: Record) -> Record:
        web = await self._api()
        values = web.opportunity_values(row)
        if isinstance(values.get("close_date"), str):
            values["close_date"] = values["close_date"][:10]
        owner = row.get("_ownerid_value")
        values["owner"] = {"id": owner} if owner else None
        account = row.get("_parentaccountid_value")
        values["account"] = {"id": account} if account else None
        closed = CLOSED_STAGE.get(row.get("statecode", 0))
        if closed is not None:
            # Won or lost whatever its sales stage was: the copilot's stage for it, and the day.
            values["stage"] = closed
            values["closed_at"] = row.get("actualclosedate")
        return values

    async def open_opportunities(self, *, account_id: str | None = None, mine: bool = False) -> list[Record]:
        """Open (``statecode eq 0``) ``opportunities`` of the account and/or the rep's own."""
        conditions = ["statecode eq 0"]
        if account_id is not None:
            conditions.append(f"_parentaccountid_value eq {guid(account_id)}")
        if mine:
            conditions.append(f"_ownerid_value eq {guid(str((await self.me()).get('id') or ''))}")
        select, expand = await self._opportunity_select()
        columns = {**self._config.opportunity_columns}
        rows = await self._rows(
            "opportunity",
            select,
            where=" and ".join(conditions),
            orderby=f"{columns['close_date']} asc",
            expand=expand,
        )
        return [await self._opportunity(r) for r in rows]

    async def closed_opportunities(
        self, *, since: datetime, account_id: str | None = None, mine: bool = False
    ) -> list[Record]:
        """Won or lost (``statecode`` 1 or 2) ``opportunities`` of the account and/or the rep's own,
        closed on or after ``since``'s day (``actualclosedate`` is a date) or changed since
        (``modifiedon``: a closed deal is read-only, so its last change is its close)."""
        moment = since.astimezone(UTC)
        conditions = [
            "(statecode eq 1 or statecode eq 2)",
            f"(actualclosedate ge {moment:%Y-%m-%d} or modifiedon ge {moment:%Y-%m-%dT%H:%M:%SZ})",
        ]
        if account_id is not None:
            conditions.append(f"_parentaccountid_value eq {guid(account_id)}")
        if mine:
            conditions.append(f"_ownerid_value eq {guid(str((await self.me()).get('id') or ''))}")
        select, expand = await self._opportunity_select()
        rows = await self._rows(
            "opportunity", select, where=" and ".join(conditions), orderby="modifiedon desc", expand=expand
        )
        return [await self._opportunity(r) for r in rows]

    # --- activities ------------------------------------------------------------------------------

    def _activity(self, row: Record) -> Record:
        tables = {table: kind for kind, table in self._config.activity_tables.items()}
        code = str(row.get("activitytypecode") or "")
        # When it happened: a completed activity's actual end, a meeting's start, else when it
        # was logged (an open task).
        occurred = row.get("actualend") or row.get("scheduledstart") or row.get("createdon")
        activity: Record = {
            "id": row.get("activityid"),
            "type": tables.get(code, code),
            "subject": row.get("subject") or "",
            "notes": row.get("description") or "",
            "occurred_at": occurred,
            "regarding_id": row.get("_regardingobjectid_value"),
        }
        if code == "task":
            # A task's due date is its scheduledend; a completed one is done, whatever its date.
            activity["due_date"] = str(row["scheduledend"])[:10] if row.get("scheduledend") else None
            activity["done"] = row.get("statecode") == 1
        return activity

    async def activities(
        self,
        *,
        account_id: str | None = None,
        opportunity_id: str | None = None,
        since: datetime | None = None,
        limit: int = 100,
    ) -> list[Record]:
        """``activitypointers`` regarding the opportunity, or the account and any of its deals (as
        the reference CRM counts an account's activities), not canceled; newest first by when
        they happened (sorted here: Dataverse has no column for that across activity types)."""
        regarding: list[str] = []
        if opportunity_id is not None:
            regarding.append(guid(opportunity_id))
        if account_id is not None:
            account = guid(account_id)
            deals = await self._rows(
                "opportunity", ("opportunityid",), where=f"_parentaccountid_value eq {account}"
            )
            regarding += [account, *(str(d["opportunityid"]) for d in deals if d.get("opportunityid"))]
            # A task about one person regards that contact (a Dataverse task has no parties).
            people = await self._rows(
                "contact", ("contactid",), where=f"_parentcustomerid_value eq {account}"
            )
            regarding += [str(p["contactid"]) for p in people if p.get("contactid")]
        if not regarding:
            raise CrmCallError("validation", "activities are read for an account or an opportunity")
        about = " or ".join(f"_regardingobjectid_value eq {r}" for r in dict.fromkeys(regarding))
        rows = await self._rows(
            "activitypointer",
            _ACTIVITY_SELECT,
            where=f"({about}) and statecode ne {CANCELED}",
            expand=f"{PARTIES}($select=_partyid_value,participationtypemask)",
            lookup_tables=True,
        )
        found = [self._activity(r) for r in rows]
        parties = {id(a): self._contact_parties(r) for a, r in zip(found, rows, strict=True)}
        moments = {id(a): _instant(a["occurred_at"]) for a in found}
        if since is not None:
            found = [a for a in found if (m := moments[id(a)]) is not None and m >= since]
        found.sort(
            key=lambda a: (moments[id(a)] or datetime.min.replace(tzinfo=UTC), str(a["id"])), reverse=True
        )
        found = found[: max(0, limit)]
        names = await self._contact_names([c for a in found for c in parties[id(a)]])
        for activity in found:
            activity["contacts"] = [{"id": c, "name": names[c]} for c in parties[id(activity)] if c in names]
        return found

    @staticmethod
    def _contact_parties(row: Record) -> list[str]:
        """The contacts among an activity row's parties (any participation: To, attendee,
        Regarding), in order, once each."""
        found: list[str] = []
        for party in row.get(PARTIES) or []:
            if not isinstance(party, dict):
                continue
            table, party_id = party.get(LOOKUP_TABLE), party.get("_partyid_value")
            # Without the annotation the id may be anyone's: the contacts read below keeps contacts.
            if table in (None, "contact") and isinstance(party_id, str) and _GUID.match(party_id):
                found.append(party_id.lower())
        return list(dict.fromkeys(found))

    async def _contact_names(self, contact_ids: list[str]) -> dict[str, str]:
        """id → full name of the contacts the rep can read among ``contact_ids`` (one that the
        CRM does not return to the rep is left out, as the reference CRM leaves it out)."""
        wanted = list(dict.fromkeys(contact_ids))
        names: dict[str, str] = {}
        for start in range(0, len(wanted), CONTACT_BATCH):
            batch = wanted[start : start + CONTACT_BATCH]
            rows = await self._rows(
                "contact",
                ("contactid", "fullname"),
                where=" or ".join(f"contactid eq {c}" for c in batch),
            )
            names |= {
                str(r["contactid"]).lower(): str(r.get("fullname") or "") for r in rows if r.get("contactid")
            }
        return names

    # --- change history (the audit table) -----------------------------------------------------

    async def _user_name(self, user_id: str, names: dict[str, str]) -> str:
        if user_id not in names:
            try:
                row = await self._one(f"{self._set('systemuser')}({guid(user_id)})", _USER_SELECT)
                names[user_id] = str(row.get("fullname") or "")
            except CrmCallError:
                names[user_id] = ""  # a user the rep may not read: not named
        return names[user_id]

    async def history(self, kind: TargetKind, record_id: str) -> list[Record]:
        """``RetrieveRecordChangeHistory`` of an account or opportunity: each audit detail's
        ``audit`` row (when, who) and its old and new column values, in the copilot's field names.

        Needs auditing on for the organisation and the table (and the rep's *View Audit History*
        privilege); a CRM that refuses says so as ``not_supported`` / ``permission_denied``.
        """
        if kind == "contact":
            raise CrmCallError("not_supported", "change history is read for accounts and opportunities")
        web = await self._api()
        target = f"{self._set(kind)}({guid(record_id)})"
        response = await web.send(
            "GET",
            "RetrieveRecordChangeHistory(Target=@target)",
            params={"@target": "{'@odata.id':'" + target + "'}"},
        )
        if response.status_code == 400:
            raise CrmCallError("not_supported", "the CRM keeps no change history of this record")
        if response.status_code != 200:
            raise refusal(response)
        collection = response.json().get("AuditDetailCollection") or {}
        names: dict[str, str] = {}
        versions: list[Record] = []
        for detail in collection.get("AuditDetails") or []:
            if not isinstance(detail, dict) or not isinstance(detail.get("AuditRecord"), dict):
                continue
            audit = detail["AuditRecord"]
            old, new = detail.get("OldValue") or {}, detail.get("NewValue") or {}
            if kind == "opportunity":
                before = {k: v for k, v in web.opportunity_values(old).items() if k not in ("id", "version")}
                after = {k: v for k, v in web.opportunity_values(new).items() if k not in ("id", "version")}
                # Won or lost (statecode 1 / 2) is a move to the copilot's Won / Lost stage.
                for values, row in ((before, old), (after, new)):
                    if (closed := CLOSED_STAGE.get(row.get("statecode", -1))) is not None:
                        values["stage"] = closed
            else:
                before = {k: v for k, v in old.items() if not k.startswith("@")}
                after = {k: v for k, v in new.items() if not k.startswith("@")}
            changes = [
                {"field": name, "old": before.get(name), "new": after.get(name)}
                for name in dict.fromkeys([*before, *after])
                if before.get(name) != after.get(name)
            ]
            for change in changes:
                if change["field"] == "close_date":
                    change["old"] = change["old"][:10] if isinstance(change["old"], str) else change["old"]
                    change["new"] = change["new"][:10] if isinstance(change["new"], str) else change["new"]
            user = str(audit.get("_userid_value") or "")
            versions.append(
                {
                    "record_id": record_id,
                    "at": audit.get("createdon"),
                    "by": {"id": user, "name": await self._user_name(user, names) if user else ""},
                    "operation": "create" if audit.get("operation") == 1 else "update",
                    "changes": changes,
                }
            )
        versions.sort(key=lambda v: str(v["at"]))
        if kind == "opportunity":
            _known_stage_before(versions)
        return versions

    # --- one record ------------------------------------------------------------------------------

    async def record(self, kind: TargetKind, record_id: str) -> Record:
        """One account, opportunity or contact by GUID."""
        match kind:
            case "account":
                return await self.account(record_id)
            case "opportunity":
                select, expand = await self._opportunity_select()
                row = await self._one(f"{self._set('opportunity')}({guid(record_id)})", select, expand)
                return await self._opportunity(row)
            case "contact":
                row = await self._one(
                    f"{self._set('contact')}({guid(record_id)})",
                    ("contactid", "fullname", "jobtitle", "_parentcustomerid_value", "createdon"),
                )
                # Read to name a proposal's target: no address.
                return {k: v for k, v in self._contact(row).items() if k != "email"}
            case _:
                assert_never(kind)
