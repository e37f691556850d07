"""DatasetPreview driven like a user would: construct, page forward and back, read the cards."""

from __future__ import annotations

import io

import ipywidgets as widgets
import pytest
from PIL import Image

from kpl_lab.errors import NotFound
from kpl_lab.widgets import DatasetPreview


def card_text(card: widgets.VBox) -> str:
    return card.children[-1].value


def test_pages_through_records_with_thumbnails(kpl_server, kpl_data):
    preview = DatasetPreview("shapes", client=kpl_server.client(), page_size=4, thumbnail=16)
    assert preview.version == kpl_data.dataset["version"]
    assert (preview.total, preview.pages, preview.page) == (6, 2, 0)
    assert "6 records" in preview.title.value and preview.status.value.startswith("page 1 of 2 (records 0–3)")
    assert preview.prev_button.disabled and not preview.next_button.disabled
    assert len(preview.grid.children) == 4

    preview.next_button.click()
    assert preview.page == 1 and [r["index"] for r in preview.records] == [4, 5]
    assert (
        len(preview.grid.children) == 2 and preview.next_button.disabled and not preview.prev_button.disabled
    )
    preview.next_page()  # past the end: stays
    assert preview.page == 1

    cards = list(preview.grid.children)
    preview.prev_page()
    cards += list(preview.grid.children)
    assert preview.page == 0 and preview.prev_button.disabled
    images = [c for c in cards if isinstance(c.children[0], widgets.Image)]
    assert len(images) == 5
    for card in images:
        thumb = card.children[0]
        assert thumb.format == "png"
        with Image.open(io.BytesIO(thumb.value)) as picture:
            assert max(picture.size) <= 16
        assert "images/" in card_text(card) and "contentType: image/png" in card_text(card)
    (notes,) = [c for c in cards if "notes.txt" in card_text(c)]
    assert "content: five squares, one colour each" in card_text(notes)


def test_unknown_dataset_is_not_found(kpl_server, kpl_data):
    with pytest.raises(NotFound):
        DatasetPreview("no-such-dataset", client=kpl_server.client())
