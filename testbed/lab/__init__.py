"""Labs that stay up: ``testbed up`` builds one variant of a scenario and leaves it
running under a name, owned by a small supervisor process, until ``testbed down``.

* :mod:`.state` -- the lab's record (``/run/testbed/RUNID/lab.json``) and how labs are found;
* :mod:`.supervisor` -- the process that builds the lab, holds it (the Mininet object,
  the controller, FRR) and serves requests over a Unix socket;
* :mod:`.fabric_lab`, :mod:`.backbone_lab` -- one kind each: bring-up, hosts, faults;
* :mod:`.mncli` -- Mininet's CLI served over that socket;
* :mod:`.capture` -- tcpdump on a named port, in the namespace that holds it;
* :mod:`.commands` -- the command line (``ls``, ``inspect``, ``exec``, ``cli``, ``fault``,
  ``accept``, ``expand``, ``capture``, ``down``, ...) and its parsers;
* :mod:`.up` -- ``testbed up``: the supervisor started, its progress relayed, the lab
  described;
* :mod:`.attach` -- Mininet's CLI of a fabric lab relayed to this terminal;
* :mod:`.client` -- what the commands share: a request to the supervisor, the lab class
  of a record, the root check.
"""
