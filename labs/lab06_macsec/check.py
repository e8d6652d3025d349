"""Lab 6 checks: MACsec on the wire (``testbed check 6 RESULTS``), on a results folder of
``labs/lab06_macsec/*/scenario.yaml``: the SecY's own counters (IEEE 802.1AE clause 10.7)
and the forwarders' frame accounting, as summary.json's ``macsec`` section holds them.
"""

from __future__ import annotations

from testbed.reports.grading import Missing, Results, Verdict, verdict
from testbed.reports.predictions import Number

THROUGHPUT = 0.8  # protected bulk goodput at least this share of the unprotected


def _macsec(r: Results) -> dict:
    m = r.summary.get("macsec")
    if not isinstance(m, dict) or not m.get("links"):
        raise Missing("summary.json has no macsec section (is this a macsec run?)")
    return m


def _sides(r: Results) -> dict:
    return _macsec(r)["links"][0]["sides"]


def confidential(r: Results) -> Verdict:
    """Every frame the SecYs sent was encrypted (OutPktsEncrypted), none only
    integrity-protected (OutPktsProtected) or untagged."""
    sides = _sides(r)
    enc = sum(s["OutPktsEncrypted"] for s in sides.values())
    prot = sum(s["OutPktsProtected"] + s.get("OutPktsUntagged", 0) for s in sides.values())
    return verdict(enc > 0 and prot == 0, f"{enc:,} frames encrypted, {prot:,} sent readable "
                                          "(integrity only or untagged)")


def attack_rejected(r: Results) -> Verdict:
    """No injected frame reached the receiving host (exact frame accounting)."""
    a = _macsec(r).get("attack") or {}
    if "delivered_to_tap" not in a:
        raise Missing("summary.json has no macsec.attack accounting (did the attack run?)")
    sent = a["tampered_sent"] + a["replayed_sent"] + a["untagged_sent"]
    return verdict(sent > 0 and a["delivered_to_tap"] == 0,
                   f"{a['delivered_to_tap']} of {sent} injected frames reached the host"
                   + ("" if a.get("accounting_exact") else " (accounting not exact)"))


def attack_counted(r: Results) -> Verdict:
    """Each kind of attack counted where the standard counts it: tampered ->
    InPktsNotValid, replayed -> InPktsLate, untagged -> InPktsNoTag."""
    a = _macsec(r).get("attack") or {}
    got = a.get("counters_b") or {}
    want = {"InPktsNotValid": a.get("tampered_sent", 0), "InPktsLate": a.get("replayed_sent", 0),
            "InPktsNoTag": a.get("untagged_sent", 0)}
    rows = [f"{k} {got.get(k, 0)}/{n}" for k, n in want.items()]
    ok = all(got.get(k, 0) >= n for k, n in want.items()) and any(want.values())
    return verdict(ok, "counted/sent: " + ", ".join(rows))


def keys_rotated(r: Results) -> Verdict:
    """The keys rotated during traffic (a new association number)."""
    rot = _macsec(r).get("rotations") or []
    return verdict(bool(rot), ", ".join(f"AN {x['an']} at {x['at_s']:.1f} s" for x in rot)
                   or "no rotation during traffic")


def chains_and_bulk(r: Results) -> Verdict:
    """Chains survived the attack; bulk throughput >= 80 % of the unprotected link's."""
    t = _macsec(r).get("throughput_mbps") or {}
    prot, plain = t.get("protected"), t.get("unprotected")
    if not prot or not plain:
        raise Missing("summary.json has no macsec.throughput_mbps")
    failed_chains = r.value("protected", "agents.chains_failed")
    ok = prot >= THROUGHPUT * plain and failed_chains == 0
    return verdict(ok, f"bulk {prot:.1f} Mb/s protected against {plain:.1f} unprotected "
                       f"({prot / plain:.2f}x, needs {THROUGHPUT}x); {failed_chains} chains "
                       "failed")


CHECKS = [confidential, attack_rejected, attack_counted, keys_rotated, chains_and_bulk]


def _bulk_share(r: Results) -> float:
    t = _macsec(r).get("throughput_mbps") or {}
    if not t.get("protected") or not t.get("unprotected"):
        raise Missing("summary.json has no macsec.throughput_mbps")
    return t["protected"] / t["unprotected"]


def _delivered(r: Results) -> float:
    a = _macsec(r).get("attack") or {}
    if "delivered_to_tap" not in a:
        raise Missing("summary.json has no macsec.attack accounting (did the attack run?)")
    return a["delivered_to_tap"]


#: the guide's "Predict, then run" questions graded against the run (predictions.yaml):
#: bulk goodput protected over unprotected (within 10 %), and the injected frames that
#: reach the host with the starter's ``validate: check`` (within 2 frames)
PREDICTIONS = [
    Number("1", _bulk_share, unit="x", within=0.10),
    Number("3", _delivered, unit="frames", within_abs=2),
]
