"""The tables this Dataverse profile exposes: columns, types, lookups, option sets, keys.

One description feeds the Web API (which columns exist, which are lookups), the metadata
endpoints (``EntityDefinitions``), the MCP ``describe``/``search`` tools and the SQL
tables ``read_query`` runs over. The alternate-key column of activities is a custom
column whose logical name is a setting (``SandboxSettings.dataverse_activity_key``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from sandbox.crm import OPEN_STAGES

ColumnType = str
"""``uniqueidentifier``, ``string``, ``memo``, ``money``, ``integer``, ``bigint``,
``datetime``, ``dateonly``, ``picklist``, ``state``, ``status`` or ``lookup``."""

SQL_TYPES: dict[ColumnType, str] = {
    "uniqueidentifier": "UNIQUEIDENTIFIER",
    "string": "NVARCHAR",
    "memo": "NVARCHAR(MAX)",
    "money": "MONEY",
    "integer": "INT",
    "bigint": "BIGINT",
    "datetime": "DATETIME",
    "dateonly": "DATE",
    "picklist": "INT",
    "state": "INT",
    "status": "INT",
    "lookup": "UNIQUEIDENTIFIER",
}


@dataclass(frozen=True)
class Column:
    """One attribute; ``targets`` name the tables a lookup may point at."""

    name: str
    type: ColumnType
    description: str = ""
    targets: tuple[str, ...] = ()
    secured: bool = False
    max_length: int | None = None

    @property
    def row_key(self) -> str:
        """The property name in Web API rows: lookups read back as ``_<name>_value``."""
        return f"_{self.name}_value" if self.type == "lookup" else self.name


@dataclass(frozen=True)
class Navigation:
    """A single-valued navigation property: bind and expand through lookup ``column``."""

    name: str
    column: str
    target: str


@dataclass(frozen=True)
class Entity:
    """One table as Dataverse describes it."""

    logical_name: str
    set_name: str
    primary_id: str
    primary_name: str
    object_type_code: int
    description: str
    columns: tuple[Column, ...]
    navigation: tuple[Navigation, ...] = ()
    alternate_key: str | None = None
    writable: bool = False
    activity: bool = False
    party_masks: frozenset[int] = field(default_factory=frozenset)

    def column(self, name: str) -> Column | None:
        """The column called ``name`` (logical name or ``_x_value`` form), if any."""
        for column in self.columns:
            if name in (column.name, column.row_key):
                return column
        return None

    def nav(self, name: str) -> Navigation | None:
        """The navigation property called ``name``, if any."""
        return next((n for n in self.navigation if n.name == name), None)

    @property
    def parties_property(self) -> str:
        """The activity-party collection of an activity: written with it (``phonecall_activity_parties``),
        and expanded on reads, also across activity types (``activity_pointer_activity_parties``)."""
        if self.logical_name == "activitypointer":
            return "activity_pointer_activity_parties"
        return f"{self.logical_name}_activity_parties"


# statecode -> (label, {statuscode: label}); the first status of a state is its default.
STATES: dict[str, dict[int, tuple[str, dict[int, str]]]] = {
    "account": {0: ("Active", {1: "Active"}), 1: ("Inactive", {2: "Inactive"})},
    "contact": {0: ("Active", {1: "Active"}), 1: ("Inactive", {2: "Inactive"})},
    "systemuser": {0: ("Active", {1: "Active"})},
    "opportunity": {
        0: ("Open", {1: "In Progress", 2: "On Hold"}),
        1: ("Won", {3: "Won"}),
        2: ("Lost", {4: "Canceled", 5: "Out-Sold"}),
    },
    "task": {
        0: ("Open", {2: "Not Started", 3: "In Progress", 4: "Waiting on someone else", 7: "Deferred"}),
        1: ("Completed", {5: "Completed"}),
        2: ("Canceled", {6: "Canceled"}),
    },
    "phonecall": {
        0: ("Open", {1: "Open"}),
        1: ("Completed", {2: "Made", 4: "Received"}),
        2: ("Canceled", {3: "Canceled"}),
    },
    "appointment": {
        0: ("Open", {1: "Free", 2: "Tentative"}),
        1: ("Completed", {3: "Completed"}),
        2: ("Canceled", {4: "Canceled"}),
        3: ("Scheduled", {5: "Busy", 6: "Out of Office"}),
    },
    "email": {
        0: ("Open", {1: "Draft"}),
        1: ("Completed", {3: "Sent"}),
        2: ("Canceled", {5: "Canceled"}),
    },
}
STATES["activitypointer"] = {0: ("Open", {}), 1: ("Completed", {}), 2: ("Canceled", {}), 3: ("Scheduled", {})}


def default_status(entity: str, statecode: int) -> int:
    """The status reason a state takes when none is given."""
    return next(iter(STATES[entity][statecode][1]))


def sales_stages() -> dict[int, str]:
    """The ``salesstage`` option set: this organisation's open pipeline stages, in order."""
    return dict(enumerate(OPEN_STAGES))


# Which activity types the sandbox's own ``activities.type`` maps to, and back.
ACTIVITY_ENTITY_BY_TYPE = {"call": "phonecall", "task": "task", "meeting": "appointment", "email": "email"}
TYPE_BY_ACTIVITY_ENTITY = {v: k for k, v in ACTIVITY_ENTITY_BY_TYPE.items()}

# participationtypemask values each activity accepts (reference §3.6).
PARTY_MASKS = {
    "phonecall": frozenset({1, 2}),
    "appointment": frozenset({5, 6, 7}),
    "email": frozenset({1, 2, 3, 4}),
    "task": frozenset(),
}

_COMMON_TAIL = (
    Column("statecode", "state", "Status"),
    Column("statuscode", "status", "Status Reason"),
    Column("versionnumber", "bigint", "Row version (the ETag)"),
)


def _activity(logical: str, set_name: str, otc: int, key_column: str, description: str) -> Entity:
    regarding_targets = ("account", "opportunity", "contact")
    return Entity(
        logical_name=logical,
        set_name=set_name,
        primary_id="activityid",
        primary_name="subject",
        object_type_code=otc,
        description=description,
        columns=(
            Column("activityid", "uniqueidentifier", "Activity id"),
            Column("subject", "string", "Subject", max_length=200),
            Column("description", "memo", "Description (notes)", max_length=4000),
            Column("activitytypecode", "string", "Activity type (phonecall, task, appointment, email)"),
            Column("scheduledstart", "datetime", "Start date"),
            Column("scheduledend", "datetime", "Due date (end time)"),
            Column("actualend", "datetime", "Actual end (when it happened)"),
            Column("createdon", "datetime", "Created on"),
            Column(
                "regardingobjectid",
                "lookup",
                "Regarding (account, opportunity or contact)",
                regarding_targets,
            ),
            Column("ownerid", "lookup", "Owner", ("systemuser",)),
            Column(key_column, "string", "Copilot idempotency key (alternate key)", max_length=100),
            *_COMMON_TAIL,
        ),
        navigation=(
            Navigation(f"regardingobjectid_account_{logical}", "regardingobjectid", "account"),
            Navigation(f"regardingobjectid_opportunity_{logical}", "regardingobjectid", "opportunity"),
            Navigation(f"regardingobjectid_contact_{logical}", "regardingobjectid", "contact"),
            Navigation("ownerid", "ownerid", "systemuser"),
        ),
        alternate_key=key_column if logical != "activitypointer" else None,
        writable=logical != "activitypointer",
        activity=True,
        party_masks=PARTY_MASKS.get(logical, frozenset()),
    )


@lru_cache(maxsize=8)
def entities(key_column: str) -> dict[str, Entity]:
    """Every exposed table by logical name (``key_column`` = the activities' alternate key)."""
    account = Entity(
        logical_name="account",
        set_name="accounts",
        primary_id="accountid",
        primary_name="name",
        object_type_code=1,
        description="Customer companies",
        columns=(
            Column("accountid", "uniqueidentifier", "Account id"),
            Column("name", "string", "Account name", max_length=160),
            Column("address1_city", "string", "City", max_length=80),
            Column("websiteurl", "string", "Website", max_length=200),
            Column("new_industry", "string", "Industry", max_length=100),
            Column("new_territory", "string", "Sales territory", max_length=100),
            Column("ownerid", "lookup", "Owner", ("systemuser",)),
            Column("modifiedby", "lookup", "Modified by", ("systemuser",)),
            Column("modifiedon", "datetime", "Modified on"),
            *_COMMON_TAIL,
        ),
        navigation=(Navigation("ownerid", "ownerid", "systemuser"),),
    )
    contact = Entity(
        logical_name="contact",
        set_name="contacts",
        primary_id="contactid",
        primary_name="fullname",
        object_type_code=2,
        description="People at customer accounts",
        columns=(
            Column("contactid", "uniqueidentifier", "Contact id"),
            Column("fullname", "string", "Full name", max_length=160),
            Column("firstname", "string", "First name", max_length=50),
            Column("lastname", "string", "Last name", max_length=50),
            Column("jobtitle", "string", "Job title", max_length=100),
            Column("emailaddress1", "string", "Email", max_length=100),
            Column("telephone1", "string", "Business phone", max_length=50),
            Column("parentcustomerid", "lookup", "Company (account)", ("account",)),
            Column("createdon", "datetime", "Created on"),
            *_COMMON_TAIL,
        ),
        navigation=(Navigation("parentcustomerid_account", "parentcustomerid", "account"),),
    )
    opportunity = Entity(
        logical_name="opportunity",
        set_name="opportunities",
        primary_id="opportunityid",
        primary_name="name",
        object_type_code=3,
        description="Potential sales (deals) with stage, value and close date",
        columns=(
            Column("opportunityid", "uniqueidentifier", "Opportunity id"),
            Column("name", "string", "Topic", max_length=300),
            Column("description", "memo", "Description (next step)", max_length=500),
            Column("salesstage", "picklist", "Sales stage"),
            Column("stepname", "string", "Pipeline phase", max_length=200),
            Column("estimatedvalue", "money", "Est. revenue"),
            Column("estimatedclosedate", "dateonly", "Est. close date"),
            Column("actualclosedate", "dateonly", "Actual close date (a won or lost deal's)"),
            Column("closeprobability", "integer", "Probability (0-100)"),
            Column("new_commission", "money", "Commission (secured column)", secured=True),
            Column(key_column, "string", "Copilot write key (the last update's)", max_length=100),
            Column("parentaccountid", "lookup", "Account", ("account",)),
            Column("customerid", "lookup", "Potential customer", ("account",)),
            Column("transactioncurrencyid", "lookup", "Currency", ("transactioncurrency",)),
            Column("ownerid", "lookup", "Owner", ("systemuser",)),
            Column("modifiedby", "lookup", "Modified by", ("systemuser",)),
            Column("createdon", "datetime", "Created on"),
            Column("modifiedon", "datetime", "Modified on"),
            *_COMMON_TAIL,
        ),
        navigation=(
            Navigation("parentaccountid", "parentaccountid", "account"),
            Navigation("customerid_account", "customerid", "account"),
            Navigation("transactioncurrencyid", "transactioncurrencyid", "transactioncurrency"),
            Navigation("ownerid", "ownerid", "systemuser"),
        ),
        writable=True,
    )
    systemuser = Entity(
        logical_name="systemuser",
        set_name="systemusers",
        primary_id="systemuserid",
        primary_name="fullname",
        object_type_code=8,
        description="Users of the organisation",
        columns=(
            Column("systemuserid", "uniqueidentifier", "User id"),
            Column("fullname", "string", "Full name", max_length=200),
            Column("internalemailaddress", "string", "Primary email", max_length=100),
            Column("azureactivedirectoryobjectid", "string", "Entra object id"),
            Column("new_territory", "string", "Sales territory", max_length=100),
            Column("parentsystemuserid", "lookup", "Manager", ("systemuser",)),
            *_COMMON_TAIL,
        ),
        navigation=(Navigation("parentsystemuserid", "parentsystemuserid", "systemuser"),),
    )
    tables = [
        account,
        contact,
        opportunity,
        systemuser,
        _activity("phonecall", "phonecalls", 4210, key_column, "Phone calls"),
        _activity("task", "tasks", 4212, key_column, "Tasks (scheduledend is the due date)"),
        _activity("appointment", "appointments", 4201, key_column, "Appointments (meetings)"),
        _activity("activitypointer", "activitypointers", 4200, key_column, "All activities (read only)"),
    ]
    return {t.logical_name: t for t in tables}


def by_set(key_column: str) -> dict[str, Entity]:
    """Every exposed table by entity-set name (``opportunities`` -> opportunity)."""
    return {e.set_name: e for e in entities(key_column).values()}
