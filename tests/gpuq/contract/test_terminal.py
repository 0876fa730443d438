import pytest

from gpuq.contract import terminal


def test_frames_come_whole_however_the_bytes_are_cut():
    stream = terminal.frame(terminal.DATA, b"ls -l\r") + terminal.size_frame(40, 120)
    reader = terminal.FrameReader()
    frames = [f for byte in range(len(stream)) for f in reader.feed(stream[byte : byte + 1])]
    assert frames == [(terminal.DATA, b"ls -l\r"), (terminal.SIZE, terminal.WINDOW.pack(40, 120))]
    assert terminal.window(frames[1][1]) == (40, 120)


def test_a_window_out_of_range_is_clamped():
    _, payload = terminal.FrameReader().feed(terminal.size_frame(0, 100_000))[0]
    assert terminal.window(payload) == (1, 9999)


@pytest.mark.parametrize(
    "junk",
    [
        b"x\x00\x00\x00\x01a",  # an unknown kind
        terminal.HEADER.pack(terminal.DATA, terminal.MAX_PAYLOAD + 1),  # too long to wait for
    ],
)
def test_what_is_not_a_frame_is_refused(junk):
    with pytest.raises(terminal.BadFrame):
        terminal.FrameReader().feed(junk)


def test_a_window_frame_of_the_wrong_size_is_refused():
    with pytest.raises(terminal.BadFrame):
        terminal.window(b"\x00\x01")
