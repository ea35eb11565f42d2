"""The CloudEvent types kdesched sends and receives: string constants and nothing else.

Why a leaf module: every function's registry (``kdesched_functions.FUNCTIONS``, which the
``kdesched`` command reads to list and start functions) names the types its Triggers filter on,
and ``deadletter`` must start without the policy package or the reactor (a cold start after
scale-to-zero pays for every import). :mod:`kdesched.reactor.events.routing`, which maps these types to
strategies and so imports the policy package, re-exports them; import them from here wherever
only the names are needed. This module must import nothing.
"""

PREFIX = "dev.kdesched."
NODE_ADDED = "dev.kdesched.node.added"
NODE_READY = "dev.kdesched.node.ready"
TAINTS_CHANGED = "dev.kdesched.node.taints.changed"
LABELS_CHANGED = "dev.kdesched.node.labels.changed"
RUN_REQUESTED = "dev.kdesched.run.requested"
RUN_COMPLETED = "dev.kdesched.run.completed"
PING = "dev.knative.sources.ping"
APISERVER_ADD = "dev.knative.apiserver.resource.add"
APISERVER_UPDATE = "dev.knative.apiserver.resource.update"
APISERVER_DELETE = "dev.knative.apiserver.resource.delete"

NODE_EVENTS = (NODE_ADDED, NODE_READY, TAINTS_CHANGED, LABELS_CHANGED)
"""The semantic node events the classifier emits (the node functions' inputs)."""
APISERVER_EVENTS = (APISERVER_ADD, APISERVER_UPDATE, APISERVER_DELETE)
"""ApiServerSource's event types in Resource mode (the classifier's inputs)."""
