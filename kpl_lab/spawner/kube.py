"""The Kubernetes spawner: the same profiles and validation as pods, one namespace per project.

A profile becomes the pod's image, cpu and memory limits and guarantees, an
accelerator resource (`nvidia.com/gpu`, `huawei.com/Ascend910`; a shared-GPU profile
asks for the time-sliced `nvidia.com/gpu.shared`), a memory-backed emptyDir at
/dev/shm, node selectors and tolerations. Notebooks of project P run in namespace
`kpl-P`, whose ResourceQuota (`resource_quota_manifest`) is the cluster's backstop for
the project quota in the group properties.

Only KubeSpawner's public mechanisms are used: the validated choice becomes the one
entry of `profile_list`, whose `kubespawner_override` KubeSpawner applies itself;
`modify_pod_hook` writes the project's ResourceQuota before the pod is created; `start`
names the project when the cluster's quota refuses the pod.

Pods run as a non-root user (uid 1000, gid 100 as in the Jupyter images; no privilege
escalation, no capabilities) and, when `project_storage` names the storage volume, see
only their project's folder of it (subPath `projects/<project>`), as job pods do.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Awaitable

from kubernetes_asyncio.client.rest import ApiException
from kubespawner import KubeSpawner
from traitlets import Bool, Dict, Unicode, default

from .base import KPLSpawner, http_error
from .profiles import Choice
from .quota import amount

MB = 1024 * 1024
SHM_VOLUME = "kpl-dshm"
PROJECT_VOLUME = "kpl-project"
# traits a profile sets: restored to their configured values before every start
PER_SPAWN_TRAITS = (
    "image",
    "cpu_limit",
    "cpu_guarantee",
    "mem_limit",
    "mem_guarantee",
    "extra_resource_limits",
    "extra_resource_guarantees",
    "node_selector",
    "tolerations",
    "volumes",
    "volume_mounts",
    "environment",
    "namespace",
)
ACCELERATOR_RESOURCES = {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
SHARED_ACCELERATOR_RESOURCES = {"gpu": "nvidia.com/gpu.shared", "npu": "huawei.com/Ascend910"}


def namespace_of(template: str, project: str) -> str:
    """Return the namespace of a project's notebooks (a DNS label)."""
    label = "".join(c if c.isalnum() else "-" for c in project.lower()).strip("-")
    return template.format(project=label)[:63].rstrip("-")


def resource_quota_manifest(
    project: str,
    quota: dict,
    namespace: str,
    accelerator_resources: dict[str, str] | None = None,
) -> dict:
    """Return the ResourceQuota that backs a project quota in its namespace (cpu, memory, accelerators, pods)."""
    resources = accelerator_resources or ACCELERATOR_RESOURCES
    hard: dict[str, str] = {}
    if "cpu" in quota:
        hard["limits.cpu"] = f"{quota['cpu']:g}"
    if "memory" in quota:
        hard["limits.memory"] = f"{int(quota['memory'])}Mi"
    for kind, name in resources.items():
        if kind in quota:
            hard[f"requests.{name}"] = str(int(quota[kind]))
    if "notebooks" in quota:
        # every pod of the namespace counts: jobs run by the Kubernetes executor elsewhere do not
        hard["pods"] = str(int(quota["notebooks"]))
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": "kpl-quota",
            "namespace": namespace,
            "labels": {
                "app.kubernetes.io/managed-by": "kpl-lab",
                "kpl-lab/project": namespace_of("{project}", project),
            },
        },
        "spec": {"hard": hard},
    }


def _with(value, key: str, item: dict):
    """Return a KubeSpawner list-or-dict trait value with `item` added."""
    if isinstance(value, dict):
        return {**value, key: item}
    return [*value, item]


class KPLKubeSpawner(KPLSpawner, KubeSpawner):
    """Start notebooks as pods: profiles to pod resources, a namespace and a ResourceQuota per project."""

    project_namespace_template = Unicode(
        "kpl-{project}",
        help="Namespace of a project's notebooks; {project} is the group name as a DNS label.",
    ).tag(config=True)

    accelerator_resources = Dict(
        ACCELERATOR_RESOURCES, help="Extended resource asked for each accelerator kind."
    ).tag(config=True)

    shared_accelerator_resources = Dict(
        SHARED_ACCELERATOR_RESOURCES,
        help="Extended resource of a gpu_sharing profile (NVIDIA device plugin time-slicing with renamed resources).",
    ).tag(config=True)

    project_storage = Dict(
        {},
        help="Volume source of the platform's storage root, e.g. {'persistentVolumeClaim': {'claimName': "
        "'kpl-storage'}}: each notebook mounts its project's folder of it (subPath projects/<project>) "
        "at project_storage_path. Empty: no project storage in notebooks.",
    ).tag(config=True)

    project_storage_path = Unicode(
        "/home/jovyan/project", help="Where a notebook sees its project's storage."
    ).tag(config=True)

    @default("uid")
    def _default_uid(self) -> int:
        return 1000  # jovyan in the Jupyter images: never root

    @default("gid")
    def _default_gid(self) -> int:
        return 100

    @default("fs_gid")
    def _default_fs_gid(self) -> int:
        return 100  # mounted volumes are writable by the notebook's group

    @default("container_security_context")
    def _default_container_security_context(self) -> dict:
        return {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}

    manage_resource_quota = Bool(
        True, help="Create or update each project's ResourceQuota from its group properties at every start."
    ).tag(config=True)

    @default("enable_user_namespaces")
    def _default_enable_user_namespaces(self) -> bool:
        return True  # one reflector for all namespaces: notebooks live in their project's

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._configured = {name: copy.deepcopy(getattr(self, name)) for name in PER_SPAWN_TRAITS}
        self.choice: Choice | None = None

    def _restore_configured(self) -> None:
        """Put back the configured values, so nothing of the previous spawn leaks into this one."""
        for name, value in self._configured.items():
            setattr(self, name, copy.deepcopy(value))
        self.choice = None

    def pod_overrides(self, choice: Choice) -> dict:
        """Return the `kubespawner_override` of a choice: image, resources, shm, scheduling, namespace."""
        profile = choice.profile
        overrides: dict = {
            "cpu_limit": choice.cpu,
            "cpu_guarantee": choice.cpu,
            "mem_limit": choice.memory * MB,
            "mem_guarantee": choice.memory * MB,
            "environment": {"KPL_PROJECT": choice.project, "KPL_PROFILE": profile.slug},
            "namespace": namespace_of(self.project_namespace_template, choice.project),
        }
        if profile.environment:
            overrides["image"] = profile.environment
        if choice.accelerators:
            names = self.shared_accelerator_resources if profile.gpu_sharing else self.accelerator_resources
            resource = {names[profile.accelerator]: str(choice.accelerators)}
            overrides["extra_resource_limits"] = resource
            overrides["extra_resource_guarantees"] = dict(resource)
        volumes, mounts = self.volumes, self.volume_mounts
        if choice.shm:
            shm = {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{choice.shm}Mi"}}
            volumes = _with(volumes, SHM_VOLUME, shm)
            mounts = _with(mounts, SHM_VOLUME, {"name": SHM_VOLUME, "mountPath": "/dev/shm"})
        if self.project_storage:
            volume = {"name": PROJECT_VOLUME, **self.project_storage}
            mount = {"name": PROJECT_VOLUME, "mountPath": self.project_storage_path}
            mount["subPath"] = f"projects/{choice.project}"  # this project's folder, none of the others'
            volumes = _with(volumes, PROJECT_VOLUME, volume)
            mounts = _with(mounts, PROJECT_VOLUME, mount)
        if choice.shm or self.project_storage:
            overrides["volumes"] = volumes
            overrides["volume_mounts"] = mounts
        if profile.node_selector:
            overrides["node_selector"] = dict(profile.node_selector)
        tolerations = self.tolerations
        for position, toleration in enumerate(profile.tolerations):
            tolerations = _with(tolerations, f"kpl-{profile.slug}-{position}", dict(toleration))
        if profile.tolerations:
            overrides["tolerations"] = tolerations
        return overrides

    @default("profile_list")
    def _default_profile_list(self):
        return self.chosen_profile_list

    def chosen_profile_list(self, spawner) -> list[dict]:
        """Return KubeSpawner's `profile_list`: the validated choice as its only profile."""
        choice = self.choice
        if choice is None:  # no spawn under way (KubeSpawner's own form is not used)
            return []
        return [
            {
                "slug": choice.profile.slug,
                "display_name": choice.profile.title,
                "default": True,
                "kubespawner_override": self.pod_overrides(choice),
            }
        ]

    async def load_user_options(self) -> None:
        """Validate `user_options` (form or API alike), then let KubeSpawner apply the choice as its profile."""
        self._restore_configured()
        choice = self.choose()
        quota = self.quota(choice.project)
        asked = {"cpu": choice.cpu, "memory": choice.memory}
        if choice.accelerators:
            asked[choice.profile.accelerator] = choice.accelerators
        for kind, count in asked.items():
            if kind in quota and count > quota[kind]:
                raise http_error(
                    ValueError(
                        f"asks {amount(kind, count)}; project {choice.project} allows {quota[kind]:g}"
                    ),
                    403,
                )
        self.choice = choice
        self.user_options = choice.to_options()
        if self.orm_spawner is not None:
            self.orm_spawner.user_options = self.user_options
        await super().load_user_options()

    @default("modify_pod_hook")
    def _default_modify_pod_hook(self):
        return self.prepare_project

    async def prepare_project(self, spawner, pod):
        """Write the project's ResourceQuota (`modify_pod_hook`): the cluster's backstop for its quota."""
        if self.manage_resource_quota:
            await self.ensure_resource_quota()
        return pod

    def start(self) -> Awaitable:
        """Start the pod as KubeSpawner does; a refusal by the cluster's quota names the project."""
        return asyncio.ensure_future(self._explain_quota_refusal(super().start()))

    async def _explain_quota_refusal(self, started: Awaitable):
        try:
            return await started
        except ApiException as error:
            if error.status == 403 and "exceeded quota" in (error.body or ""):
                raise http_error(
                    ValueError(
                        f"project {self.choice.project}: the cluster quota of {self.namespace} is used up"
                    ),
                    403,
                ) from None
            raise

    async def ensure_resource_quota(self) -> None:
        """Create or replace the project's ResourceQuota from the quota read now."""
        choice = self.choice
        manifest = resource_quota_manifest(
            choice.project, self.quota(choice.project), self.namespace, self.accelerator_resources
        )
        try:
            await self.api.create_namespaced_resource_quota(self.namespace, manifest)
        except ApiException as error:
            if error.status != 409:
                raise
            await self.api.replace_namespaced_resource_quota(
                manifest["metadata"]["name"], self.namespace, manifest
            )
