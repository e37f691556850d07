"""DatasetPreview: a paged grid of a dataset's records, images as thumbnails, fields as labels."""

from __future__ import annotations

import json
from html import escape

import ipywidgets as widgets

from ..client import Client

TEXT_TYPES = ("text/", "application/json", "application/xml")
TEXT_PREVIEW_BYTES = 4096  # larger text values are named, not fetched
LABEL_CHARS = 80


def is_bytes_ref(value: object) -> bool:
    """Return whether a record value stands for bytes kept on the server."""
    return isinstance(value, dict) and "$bytes" in value


def short(value: object) -> str:
    """Return a field value as at most one short line."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


class DatasetPreview(widgets.VBox):
    """Page through a dataset version: a grid of cards, one per record, with prev/next buttons."""

    def __init__(
        self,
        name: str,
        version: str | None = None,
        client: Client | None = None,
        part: str | None = None,
        page_size: int = 12,
        thumbnail: int = 128,
        columns: int = 4,
        **kwargs,
    ) -> None:
        self.client = client or Client()
        self.name = name
        self.version = self.client.dataset_version(name, version)["version"]
        self.part = part
        self.page_size = page_size
        self.thumbnail = thumbnail
        self.page = 0
        self.total = 0
        self.records: list[dict] = []
        self.title = widgets.HTML()
        self.prev_button = widgets.Button(description="◀ prev", layout=widgets.Layout(width="90px"))
        self.next_button = widgets.Button(description="next ▶", layout=widgets.Layout(width="90px"))
        self.status = widgets.HTML()
        self.grid = widgets.GridBox(
            layout=widgets.Layout(
                grid_template_columns=f"repeat({columns}, {thumbnail + 32}px)", grid_gap="8px"
            )
        )
        self.prev_button.on_click(lambda _: self.prev_page())
        self.next_button.on_click(lambda _: self.next_page())
        bar = widgets.HBox([self.prev_button, self.next_button, self.status])
        super().__init__([self.title, bar, self.grid], **kwargs)
        self.show_page(0)

    @property
    def pages(self) -> int:
        """Return how many pages the part has (at least one)."""
        return max(1, -(-self.total // self.page_size))

    def next_page(self) -> None:
        """Show the next page, if there is one."""
        if self.page + 1 < self.pages:
            self.show_page(self.page + 1)

    def prev_page(self) -> None:
        """Show the previous page, if there is one."""
        if self.page > 0:
            self.show_page(self.page - 1)

    def show_page(self, page: int) -> None:
        """Fetch and show page `page` (0-based) of the records."""
        data = self.client.records(
            self.name, self.version, part=self.part, offset=page * self.page_size, limit=self.page_size
        )
        self.part, self.total, self.records, self.page = data["part"], data["total"], data["records"], page
        self.grid.children = [self._card(record) for record in self.records]
        self.title.value = (
            f"<b>{escape(data['dataset'])}</b> part <code>{escape(self.part)}</code>: {self.total} records"
        )
        first = page * self.page_size
        self.status.value = (
            f"page {page + 1} of {self.pages} (records {first}–{first + len(self.records) - 1})"
            if self.records
            else "no records"
        )
        self.prev_button.disabled = page == 0
        self.next_button.disabled = page + 1 >= self.pages

    def _card(self, record: dict) -> widgets.VBox:
        """Return one record's card: its first image as a thumbnail, its other fields as text."""
        index, fields = record["index"], record["fields"]
        parts: list[widgets.Widget] = []
        lines = [f"<b>#{index}</b>"]
        for field, value in fields.items():
            if is_bytes_ref(value) and value["contentType"].startswith("image/") and not parts:
                content, kind = self.client.field(
                    self.name, self.version, index, field, part=self.part, thumbnail=self.thumbnail
                )
                image_format = kind.split(";")[0].split("/")[-1]
                parts.append(
                    widgets.Image(value=content, format=image_format, layout=widgets.Layout(max_width="100%"))
                )
            elif is_bytes_ref(value):
                lines.append(f"{escape(field)}: {escape(self._bytes_label(index, field, value))}")
            else:
                lines.append(f"{escape(field)}: {escape(short(value))}")
        label = widgets.HTML(
            "<div style='font-size:11px;line-height:1.3;overflow-wrap:anywhere'>"
            + "<br>".join(lines)
            + "</div>"
        )
        return widgets.VBox([*parts, label], layout=widgets.Layout(border="1px solid #ddd", padding="4px"))

    def _bytes_label(self, index: int, field: str, value: dict) -> str:
        """Return small text content itself, else the size and content type of the bytes."""
        kind, size = value["contentType"], value["$bytes"]
        if kind.startswith(TEXT_TYPES) and size <= TEXT_PREVIEW_BYTES:
            content, _ = self.client.field(self.name, self.version, index, field, part=self.part)
            return short(content.decode("utf-8", "replace"))
        return f"{size} bytes {kind}"
