"""The Dataverse SQL subset ``read_query`` accepts, checked without a server."""

from __future__ import annotations

import pytest

from sandbox.dataverse.sql import UnsupportedSql, validate

ACCEPTED = [
    "SELECT name FROM account",
    "SELECT * FROM account",
    "SELECT TOP 5 name FROM opportunity ORDER BY estimatedvalue DESC",
    "SELECT o.name, a.name FROM opportunity o JOIN account a ON o.parentaccountid = a.accountid",
    "SELECT o.name FROM opportunity o LEFT JOIN account a ON o.parentaccountid = a.accountid",
    "SELECT name FROM account WHERE name LIKE '%acme%' AND address1_city IS NOT NULL",
    "SELECT name FROM opportunity WHERE estimatedvalue BETWEEN 10 AND 20 OR salesstage IN (1, 2)",
    "SELECT ownerid, COUNT(*) AS n, SUM(estimatedvalue), AVG(estimatedvalue), MIN(estimatedvalue),"
    " MAX(estimatedvalue) FROM opportunity GROUP BY ownerid",
    "SELECT name FROM opportunity WHERE NOT (statecode = 1)",
]

REFUSED = {
    "SELECT DISTINCT name FROM account": "DISTINCT",
    "SELECT COUNT(DISTINCT name) FROM account": "DISTINCT",
    "SELECT ownerid FROM opportunity GROUP BY ownerid HAVING COUNT(*) > 1": "HAVING",
    "SELECT name FROM account WHERE accountid IN (SELECT parentaccountid FROM opportunity)": "subqueries",
    "SELECT name FROM (SELECT name FROM account) x": "subqueries",
    "SELECT name FROM account ORDER BY name OFFSET 5 ROWS FETCH NEXT 5 ROWS ONLY": "OFFSET",
    "SELECT name FROM account UNION SELECT fullname FROM contact": "UNION",
    "SELECT name FROM account UNION ALL SELECT fullname FROM contact": "UNION",
    "SELECT CASE WHEN statecode = 0 THEN 1 ELSE 0 END FROM opportunity": "CASE",
    "SELECT IIF(statecode = 0, 1, 0) FROM opportunity": "CASE",
    "SELECT CAST(estimatedvalue AS INT) FROM opportunity": "CAST",
    "SELECT CONVERT(INT, estimatedvalue) FROM opportunity": "CAST",
    "WITH x AS (SELECT name FROM account) SELECT name FROM x": "WITH",
    "SELECT name FROM opportunity WHERE estimatedclosedate > GETDATE()": "date functions",
    "SELECT YEAR(createdon) FROM account": "date functions",
    "SELECT DATEADD(day, 1, createdon) FROM account": "date functions",
    "SELECT LOWER(name) FROM account": "function",
    "SELECT name FROM account; SELECT name FROM contact": "one statement",
    "DELETE FROM account": "only SELECT",
    "UPDATE account SET name = 'x'": "only SELECT",
    "SELECT name FROM sys.tables": "unknown table",
    "SELECT name FROM lead": "unknown table",
    "SELECT TOP 10 PERCENT name FROM account": "not",
    "": "empty",
    "SELEC name FROM": "",
}


@pytest.mark.parametrize("query", ACCEPTED)
def test_the_documented_subset_is_accepted(query: str):
    assert validate(query) is not None


@pytest.mark.parametrize(("query", "reason"), REFUSED.items())
def test_everything_outside_the_subset_is_refused_as_unsupported_sql(query: str, reason: str):
    with pytest.raises(UnsupportedSql) as refused:
        validate(query)

    assert str(refused.value).startswith("Unsupported SQL")
    assert reason in str(refused.value)
