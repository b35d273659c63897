"""Device configuration space of virtio-9p (virtio 1.x 5.11.4: ``le16 tag_len; u8 tag[tag_len]``)."""

from __future__ import annotations

from fixtures.case_path import case_path
from fixtures.pool import Device
from harness.virtio.driver import F_MOUNT_TAG


@case_path("config")
def test_config(device: Device) -> None:
    """ "The tag is encoded in UTF-8 and padded with 0s" is not done by QEMU: tag_len is exact.

    Checks the feature bit that announces the tag, the length field and every byte.
    """
    driver = device.driver
    assert driver.features & F_MOUNT_TAG, f"VIRTIO_9P_MOUNT_TAG not negotiated: {driver.features:#x}"
    want = device.machine.config.mount_tag.encode()
    raw = driver.function.read_config(0, 2 + len(want) + 1)
    assert int.from_bytes(raw[:2], "little") == len(want), f"tag_len field reads {raw[:2].hex()}"
    assert raw[2 : 2 + len(want)] == want
    assert driver.mount_tag() == "qtest"


@case_path("startup/no_deprecated_option")
def test_no_deprecated_option(device: Device) -> None:
    """The harness starts QEMU with options current on every supported version: QEMU says
    nothing of deprecation about its argv (QEMU 11.1 deprecates ``-mon``, which libqtest used)."""
    printed = device.machine.output_text()
    assert "deprecated" not in printed.lower(), printed
