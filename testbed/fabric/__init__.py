"""The fabric: bring-up of switches, hosts and controller, the lab's own Open vSwitch
processes, traffic classes and their queues, PFC, phantom-queue ECN, drops no queue
counts."""
