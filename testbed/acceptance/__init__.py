"""Acceptance of a brought-up fabric before it carries work: each check measured on real
packets against what the spec says, with a verdict per link, switch and node.

* :mod:`.lldp` -- LLDP frames (IEEE 802.1AB) built with Scapy and exchanged over raw
  packet sockets on every host NIC and switch port, in the namespace that holds each;
* :mod:`.cabling` -- what every port heard against the spec's links, rail by rail: a
  swapped or missing cable named by both its ends.
"""
