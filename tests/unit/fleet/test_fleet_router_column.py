"""A fleet roll's router column says one true thing: what the drain did, then where the host is now (issue 38:
after a SIGTERMed roll it read "left out of the router … was not in the router: added back, healthy")."""

from __future__ import annotations

from orchestrator.fleet.router_column import RouterColumn, added_back, after_undo, left_out

DRAINED = "removed from the router; 2 request(s) in flight finished in 0.4 s"


def test_a_later_statement_replaces_the_earlier_one_and_keeps_the_drain() -> None:
    column = RouterColumn(drained=DRAINED, now=left_out(interrupted=True))
    assert column.text() == (f"{DRAINED}; out of the router: its roll was interrupted (--resume checks it and adds "
                             "it back)")
    column.now = added_back(1.25, "a request through the router reached it (1 tried)", was_out=column.now)
    assert column.text() == (f"{DRAINED}; checked and added back, healthy after 1.2 s; a request through the router "
                             "reached it (1 tried)")
    assert "out of the router" not in column.text() and "left out" not in column.text()


def test_a_failed_roll_is_left_out_and_an_interrupted_one_is_not_called_a_failure() -> None:
    assert left_out(interrupted=False) == "left out of the router after the failure (add it back once checked)"
    assert "failure" not in left_out(interrupted=True) and "interrupted" in left_out(interrupted=True)


def test_an_add_back_at_resume_says_the_router_did_not_list_it() -> None:
    assert RouterColumn(now=added_back(0.5, "", was_out="")).text() == ("was not in the router: added back, healthy "
                                                                          "after 0.5 s")


def test_after_an_undo_the_column_names_one_place() -> None:
    back = after_undo("none reached it", None, None)
    assert back.endswith("rolled back to the previous release and back in the router") and "NOT" not in back
    still_out = after_undo("none reached it", None, "worker unhealthy")
    assert still_out.startswith("NOT back in the router: none reached it") and " and back in" not in still_out
    assert "rolling back failed too: no previous release" in after_undo("x", "no previous release", None)
    assert RouterColumn().text() == "" and RouterColumn(now="no router: not drained").text() == "no router: not " \
                                                                                               "drained"
