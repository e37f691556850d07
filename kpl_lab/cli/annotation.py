"""`kpl-lab annotation ...`: labelling tasks, their queues, labels, review and history, through `Client`.

Every command calls `Client` methods: under the hub the shared service's, on this machine a
`Client` whose requests run the operations of `kpl_lab.annotation.operations` in this process
(the same functions the REST handlers call), as the home's owner, who administers it.
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Mapping
from typing import Any

from ..api.annotation import AnnotationTask, ExportFormat, QueueOrder, RecordState, TaskKind
from ..errors import BadRequest, NotFound
from ..notebook.client import Client
from ..text import emit_json, human_time, render_fields, render_table


class LocalClient(Client):
    """A `Client` whose requests run in this process on a platform it opened, not over HTTP."""

    def __init__(self, platform, project: str) -> None:
        self.platform, self.project = platform, project
        self.url, self.token, self.timeout = "in-process", "", 0.0

    def request(
        self, method: str, path: str, params: Mapping[str, Any] | None = None, body: Any = None
    ) -> Any:
        """Run the annotation operation that takes this method and path; answer its JSON."""
        from ..annotation.operations import OPERATIONS, Caller

        query = {
            k: str(int(v) if isinstance(v, bool) else v) for k, v in (params or {}).items() if v is not None
        }
        project = query.pop("project", None) or self.project
        for operation in OPERATIONS:
            names = operation.match(method, path)
            if names is not None:
                caller = Caller(self.platform, project, getpass.getuser(), admin=True)
                answer = operation(caller, names, query, body)
                return answer if isinstance(answer, bytes) else answer.model_dump(mode="json", by_alias=True)
        raise NotFound(f"no operation {method} /{path} runs in this process")

    def raw(self, path: str, params: dict[str, Any] | None = None) -> tuple[bytes, str]:
        """Run a GET operation that answers bytes (an export)."""
        return self.request("GET", path, params), "application/zip"

    def _upload(self, path: str, archive, params: dict, progress) -> dict:
        """Run an upload operation on the file itself (an import)."""
        return self.request("POST", path, params, body=str(archive))


def client_of(platform) -> Client:
    """Return the `Client` of a platform `open_platform` gave: the service's, or one running here."""
    client = getattr(platform, "client", None)
    return client if client is not None else LocalClient(platform.platform, platform.project)


def parse_class(text: str) -> dict:
    """Parse `NAME` or `NAME:CHILD,CHILD` (a class with its second-level classes)."""
    name, _, children = text.partition(":")
    if not name.strip():
        raise BadRequest(f"--class {text!r}: expected NAME or NAME:CHILD,CHILD", field="label_schema.classes")
    return {"name": name.strip(), "children": [c.strip() for c in children.split(",") if c.strip()]}


def parse_skeleton(text: str) -> list[tuple[int, int]]:
    """Parse `0-1,1-2` into pairs of keypoint indices."""
    pairs = []
    for edge in filter(None, (e.strip() for e in text.split(","))):
        a, sep, b = edge.partition("-")
        if not sep or not a.isdigit() or not b.isdigit():
            raise BadRequest(
                f"--skeleton {edge!r}: expected I-J (keypoint indices)", field="label_schema.skeleton"
            )
        pairs.append((int(a), int(b)))
    return pairs


def _names(text: str | None) -> list[str] | None:
    return None if text is None else [n.strip() for n in text.split(",") if n.strip()]


def show_text(task: AnnotationTask) -> str:
    """Return a task's fields and its progress per person."""
    progress = task.progress
    pairs = [
        ("task", task.name),
        ("kind", task.kind.value),
        ("dataset", task.dataset + " (" + ", ".join(f"{p} {n}" for p, n in task.parts.items()) + ")"),
        (
            "classes",
            ", ".join(
                c.name + (f" ({', '.join(c.children)})" if c.children else "")
                for c in task.label_schema.classes
            ),
        ),
        (
            "progress",
            f"{progress.labelled}/{progress.records} labelled ({progress.percent}%), "
            f"{progress.accepted} accepted ({progress.percent_accepted}%), {progress.rejected} rejected, "
            f"{progress.dropped} dropped, {progress.suggested} suggested",
        ),
        ("assignees", ", ".join(task.assignees) or "anyone"),
        ("reviewers", ", ".join(task.reviewers) or "anyone"),
        ("created", f"{human_time(task.created)} by {task.created_by}"),
    ]
    if task.label_schema.keypoints:
        pairs.insert(4, ("keypoints", ", ".join(task.label_schema.keypoints)))
    rows = [
        [
            p.user,
            "-" if p.assigned is None else p.assigned,
            p.labelled,
            p.accepted,
            p.rejected,
            p.reviewed,
            "-" if p.percent is None else f"{p.percent}%",
        ]
        for p in progress.people
    ]
    people = render_table(
        ["PERSON", "ASSIGNED", "LABELLED", "ACCEPTED", "REJECTED", "REVIEWED", "DONE"], rows
    )
    return render_fields(pairs) + ("\n\n" + people if rows else "")


def _print_task(args, shown: dict) -> int:
    if args.json:
        emit_json(shown)
    else:
        print(show_text(AnnotationTask.model_validate(shown)))
    return 0


def cmd_list(args, platform) -> int:
    listed = client_of(platform).annotation_tasks()
    if args.json:
        emit_json(listed)
        return 0
    if not listed:
        print(f"no annotation tasks in project {platform.project}")
        return 0
    rows = []
    for task in map(AnnotationTask.model_validate, listed):
        progress = task.progress
        rows.append(
            [
                task.name,
                task.kind.value,
                task.dataset,
                progress.records,
                f"{progress.percent}%",
                f"{progress.percent_accepted}%",
                human_time(task.created),
            ]
        )
    print(render_table(["NAME", "KIND", "DATASET", "RECORDS", "LABELLED", "ACCEPTED", "CREATED"], rows))
    return 0


def cmd_create(args, platform) -> int:
    if not args.classes:
        raise BadRequest(
            "name the classes with --class NAME[:CHILD,CHILD] (one or more)", field="label_schema.classes"
        )
    shown = client_of(platform).create_annotation_task(
        args.name,
        args.dataset,
        args.kind,
        [parse_class(text) for text in args.classes],
        keypoints=_names(args.keypoints),
        skeleton=parse_skeleton(args.skeleton) if args.skeleton else None,
        parts=_names(args.parts),
        limit=args.limit,
        content_field=args.content_field,
        assignees=args.assignees,
        reviewers=args.reviewers,
        description=args.description,
    )
    return _print_task(args, shown)


def cmd_show(args, platform) -> int:
    return _print_task(args, client_of(platform).annotation_task(args.name))


def cmd_update(args, platform) -> int:
    changes = {
        key: value
        for key, value in (
            ("description", args.description),
            ("assignees", _names(args.assignees)),
            ("reviewers", _names(args.reviewers)),
        )
        if value is not None
    }
    return _print_task(args, client_of(platform).update_annotation_task(args.name, **changes))


def cmd_delete(args, platform) -> int:
    client_of(platform).delete_annotation_task(args.name)
    print(f"deleted annotation task {args.name} with its labels")
    return 0


def cmd_queue(args, platform) -> int:
    page = client_of(platform).annotation_queue(
        args.name, args.state, args.order, args.mine, args.after, args.limit
    )
    if args.json:
        emit_json(page)
        return 0
    rows = [
        [
            e["record"],
            e["part"],
            e["index"],
            e["state"],
            e["assignee"] or "-",
            e["annotator"] or "-",
            "-" if e["uncertainty"] is None else f"{e['uncertainty']:.3f}",
        ]
        for e in page["records"]
    ]
    print(render_table(["RECORD", "PART", "INDEX", "STATE", "ASSIGNEE", "ANNOTATOR", "UNCERTAINTY"], rows))
    if page["next"]:
        print(f"more: --after {page['next']}")
    return 0


def _value(args) -> dict:
    if args.value:
        try:
            value = json.loads(args.value)
        except ValueError as error:
            raise BadRequest(f"--value: not JSON ({error})", field="value") from None
        return value
    if args.drop:
        return {"dropped": True}
    if not args.class_name:
        raise BadRequest("give --class NAME, --value JSON or --drop", field="value")
    return {"class_name": args.class_name, "subclass": args.subclass}


def _version(client: Client, args) -> int:
    """Return --version, or the version the label has now (0: none)."""
    if args.version is not None:
        return args.version
    label = client.annotation_record(args.name, args.record)["label"]
    return label["version"] if label else 0


def _print_label(args, label: dict) -> int:
    if args.json:
        emit_json(label)
        return 0
    print(f"record {label['record']}: {label['state']}, version {label['version']}, by {label['annotator']}")
    return 0


def cmd_label(args, platform) -> int:
    client = client_of(platform)
    value = _value(args)
    label = client.save_label(args.name, args.record, value, _version(client, args), args.suggestion_run)
    return _print_label(args, label)


def cmd_review(args, platform) -> int:
    client = client_of(platform)
    label = client.review_label(args.name, args.record, args.decision, _version(client, args), args.comment)
    return _print_label(args, label)


def cmd_history(args, platform) -> int:
    events = client_of(platform).label_history(args.name, args.record)
    if args.json:
        emit_json(events)
        return 0
    rows = []
    for e in events:
        value = e["value"] or {}
        what = value.get("class_name") or (f"{len(value.get('objects', []))} objects" if value else "")
        source = f"run {e['suggestion_run']} ({e['suggestion_model']})" if e["suggestion_run"] else ""
        rows.append([e["version"], e["action"], e["user"], human_time(e["at"]), what, source, e["comment"]])
    print(render_table(["VERSION", "ACTION", "USER", "AT", "VALUE", "SUGGESTION", "COMMENT"], rows))
    return 0


def cmd_publish(args, platform) -> int:
    version = client_of(platform).publish_annotation(
        args.name, args.dataset, args.test_fraction, args.seed, args.description
    )
    if args.json:
        emit_json(version)
        return 0
    parts = ", ".join(f"{p} {n}" for p, n in version["parts"].items())
    print(f"published {version['ref']}: {version['record_count']} records ({parts})")
    return 0


def cmd_export(args, platform) -> int:
    path = args.output or f"{args.name}-{args.format}.zip"
    client_of(platform).export_annotation(args.name, args.format, path, args.all)
    print(f"wrote {path}")
    return 0


def cmd_import(args, platform) -> int:
    done = client_of(platform).import_annotation(args.name, args.format, args.archive)
    if args.json:
        emit_json(done)
        return 0
    print(
        f"{done['imported']} records labelled from {done['found']} labelled images; "
        f"{done['kept']} kept their label, {done['unmatched_count']} matched no record"
    )
    for path in done["unmatched"]:
        print(f"  unmatched: {path}")
    return 0


def register(groups) -> None:
    """Add the `annotation` commands."""
    commands = groups.add_parser("annotation", help="labelling tasks: label, review, publish").add_subparsers(
        dest="command", required=True
    )
    listing = commands.add_parser("list", help="the project's labelling tasks with their progress")
    listing.set_defaults(func=cmd_list)
    create = commands.add_parser("create", help="create a labelling task on a dataset version")
    create.add_argument("name", metavar="NAME")
    create.add_argument("--dataset", required=True, metavar="NAME[:VERSION]")
    create.add_argument("--kind", required=True, choices=[k.value for k in TaskKind])
    create.add_argument(
        "--class",
        dest="classes",
        action="append",
        default=[],
        metavar="NAME[:CHILD,CHILD]",
        help="a class with its second-level classes (repeat for each class)",
    )
    create.add_argument("--keypoints", metavar="A,B,...", help="keypoint names (keypoints tasks)")
    create.add_argument("--skeleton", metavar="I-J,...", help="keypoint pairs drawn as lines")
    create.add_argument("--parts", metavar="P,...", help="the parts to label (default: every part)")
    create.add_argument("--limit", type=int, help="label only the first N records")
    create.add_argument("--content-field", help="the field annotators see (default content, or text)")
    create.add_argument("--assignee", dest="assignees", action="append", default=[], help="an annotator")
    create.add_argument("--reviewer", dest="reviewers", action="append", default=[], help="a reviewer")
    create.add_argument("--description", default="")
    create.set_defaults(func=cmd_create)
    show = commands.add_parser("show", help="a task with its progress per person")
    show.add_argument("name", metavar="NAME")
    show.set_defaults(func=cmd_show)
    update = commands.add_parser("update", help="change a task's description, annotators or reviewers")
    update.add_argument("name", metavar="NAME")
    update.add_argument("--description")
    update.add_argument("--assignees", metavar="A,B,...", help="the annotators (empty: anyone)")
    update.add_argument("--reviewers", metavar="A,B,...", help="the reviewers (empty: anyone)")
    update.set_defaults(func=cmd_update)
    delete = commands.add_parser("delete", help="delete a task with its labels and history")
    delete.add_argument("name", metavar="NAME")
    delete.set_defaults(func=cmd_delete)
    queue = commands.add_parser("queue", help="a page of a task's records")
    queue.add_argument("name", metavar="NAME")
    queue.add_argument("--state", default="unlabelled", choices=[*(s.value for s in RecordState), "all"])
    queue.add_argument("--order", default="record", choices=[o.value for o in QueueOrder])
    queue.add_argument("--mine", action="store_true", help="records dealt to me, labels I saved")
    queue.add_argument("--after", help="the cursor the previous page printed")
    queue.add_argument("--limit", type=int, default=50)
    queue.set_defaults(func=cmd_queue)
    label = commands.add_parser("label", help="save a record's label")
    review = commands.add_parser("review", help="accept or reject a record's label")
    history = commands.add_parser("history", help="every save and review of a record's label")
    for sub in (label, review, history):
        sub.add_argument("name", metavar="NAME")
        sub.add_argument("record", metavar="RECORD", type=int)
    label.add_argument("--class", dest="class_name", help="the record's class (class tasks)")
    label.add_argument("--subclass", help="its second-level class")
    label.add_argument("--value", help="the whole label value as JSON (object tasks)")
    label.add_argument("--drop", action="store_true", help="mark the record for removal")
    label.add_argument("--suggestion-run", type=int, help="the pre-labelling run whose suggestion this takes")
    review.add_argument("decision", choices=["accept", "reject"])
    review.add_argument("--comment", default="", help="what is wrong (needed to reject)")
    for sub in (label, review):
        sub.add_argument(
            "--version", type=int, help="the label's version you loaded (default: the version it has now)"
        )
    label.set_defaults(func=cmd_label)
    review.set_defaults(func=cmd_review)
    history.set_defaults(func=cmd_history)
    publish = commands.add_parser("publish", help="publish the accepted labels as a dataset version")
    publish.add_argument("name", metavar="NAME")
    publish.add_argument("--dataset", required=True, help="the dataset to add a version to")
    publish.add_argument("--test-fraction", type=float, default=0.2, help="share of each class in test")
    publish.add_argument("--seed", type=int, default=0)
    publish.add_argument("--description", default="")
    publish.set_defaults(func=cmd_publish)
    export = commands.add_parser("export", help="write the labels as a zip of COCO, VOC, YOLO or Labelme")
    export.add_argument("name", metavar="NAME")
    export.add_argument("--format", required=True, choices=[f.value for f in ExportFormat])
    export.add_argument("--output", "-o", help="the zip to write (default NAME-FORMAT.zip)")
    export.add_argument("--all", action="store_true", help="every saved label, not only the accepted")
    export.set_defaults(func=cmd_export)
    load = commands.add_parser("import", help="label unlabelled records from COCO, VOC, YOLO or Labelme")
    load.add_argument("name", metavar="NAME")
    load.add_argument("archive", metavar="ZIP")
    load.add_argument("--format", required=True, choices=[f.value for f in ExportFormat])
    load.set_defaults(func=cmd_import)
    for sub in (listing, create, show, update, queue, label, review, history, publish, load):
        sub.add_argument("--json", action="store_true", help="print JSON")
