#!/usr/bin/python3
"""A screenshot of `kvad tui` for the README: runs it in tmux, has a short
conversation, captures the pane with its colours (capture-pane -e) and
renders that text to a PNG with Pillow (Debian: python3-pil) in DejaVu Sans
Mono. Not needed to build or test kvad.

  tools/tui_screenshot.py build/kvad docs/tui.png [kvad tui options...]
"""
import re
import subprocess
import sys
import time

from PIL import Image, ImageDraw, ImageFont

SOCKET = "kvad-tui-shot"
COLS, ROWS = 120, 40
FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"
BOLD = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono-Bold.ttf"
# xterm's 16 colours, a dark theme.
PALETTE = [(0, 0, 0), (205, 49, 49), (13, 188, 121), (229, 229, 16), (36, 114, 200), (188, 63, 188),
           (17, 168, 205), (229, 229, 229), (102, 102, 102), (241, 76, 76), (35, 209, 139), (245, 245, 67),
           (59, 142, 234), (214, 112, 214), (41, 184, 219), (255, 255, 255)]
FG, BG = (204, 204, 204), (24, 24, 24)
# The VT100 line-drawing characters curses draws boxes with.
ACS = {"q": "\u2500", "x": "\u2502", "l": "\u250c", "k": "\u2510", "m": "\u2514", "j": "\u2518",
       "t": "\u251c", "u": "\u2524", "n": "\u253c", "a": "\u2592", "~": "\u00b7"}


def tmux(*args):
    return subprocess.run(["tmux", "-L", SOCKET, *args], check=True, capture_output=True, text=True).stdout


def wait(pred, bound=120):
    end = time.monotonic() + bound
    while time.monotonic() < end:
        s = tmux("capture-pane", "-p", "-t", "shot")
        if pred(s):
            return
        time.sleep(0.3)
    raise SystemExit("tui_screenshot: the screen never got there:\n" + s)


def idle(s):
    return "keys>" in s and "(Esc stops)" not in s and "loading" not in s


def colour(n):
    if n < 16:
        return PALETTE[n]
    if n < 232:
        n -= 16
        return tuple(0 if c == 0 else 55 + 40 * c for c in (n // 36, n // 6 % 6, n % 6))
    v = 8 + 10 * (n - 232)
    return (v, v, v)


def cells(line, acs):
    """(char, fg, bg, bold) per column of one captured line, and whether the
    line-drawing set is still on at its end (tmux leaves it on across lines)."""
    out, fg, bg, bold, rev, dim = [], None, None, False, False, False
    for tok in re.split(r"(\x1b\[[0-9;]*m|\x0e|\x0f)", line):
        if tok in ("\x0e", "\x0f"):  # shift out/in: the line-drawing set on/off
            acs = tok == "\x0e"
            continue
        if tok.startswith("\x1b["):
            codes = [int(c) if c else 0 for c in tok[2:-1].split(";")]
            i = 0
            while i < len(codes):
                c = codes[i]
                if c == 0: fg, bg, bold, rev, dim = None, None, False, False, False
                elif c == 1: bold = True
                elif c == 2: dim = True
                elif c == 7: rev = True
                elif c == 22: bold = dim = False
                elif c == 27: rev = False
                elif 30 <= c <= 37: fg = PALETTE[c - 30]
                elif 90 <= c <= 97: fg = PALETTE[c - 90 + 8]
                elif 40 <= c <= 47: bg = PALETTE[c - 40]
                elif c == 39: fg = None
                elif c == 49: bg = None
                elif c in (38, 48) and i + 2 < len(codes) and codes[i + 1] == 5:
                    if c == 38: fg = colour(codes[i + 2])
                    else: bg = colour(codes[i + 2])
                    i += 2
                i += 1
            continue
        for ch in tok:
            if acs:
                ch = ACS.get(ch, ch)
            f, b = fg or FG, bg or BG
            if dim: f = tuple(v * 6 // 10 for v in f)
            if rev: f, b = b, f
            out.append((ch, f, b, bold))
    return out, acs


def render(text, path):
    font, bold = ImageFont.truetype(FONT, 14), ImageFont.truetype(BOLD, 14)
    cw = round(font.getlength("M"))
    ch = 18
    img = Image.new("RGB", (COLS * cw + 16, ROWS * ch + 16), BG)
    d = ImageDraw.Draw(img)
    acs = False
    for y, line in enumerate(text.split("\n")[:ROWS]):
        row, acs = cells(line, acs)
        for x, (c, f, b, bd) in enumerate(row[:COLS]):
            px, py = 8 + x * cw, 8 + y * ch
            if b != BG:
                d.rectangle([px, py, px + cw - 1, py + ch - 1], fill=b)
            if c != " ":
                d.text((px, py + 1), c, font=bold if bd else font, fill=f)
    img = img.quantize(colors=64)
    img.save(path, optimize=True)


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    kvad, out, extra = sys.argv[1], sys.argv[2], sys.argv[3:]
    cmd = "env LANG=C.UTF-8 TERM=xterm-256color %s tui --temp 0 %s; sleep 600" % (kvad, " ".join(extra))
    tmux("new-session", "-d", "-x", str(COLS), "-y", str(ROWS), "-s", "shot", cmd)
    try:
        wait(lambda s: idle(s) and "form" in s)
        # A reply, `p` (the next form, where there is one), another reply.
        for msg in ["What is a GGUF file, in one sentence?", "p", "Show me hello world in Python, in a code block."]:
            if msg != "p":
                tmux("send-keys", "-t", "shot", "-l", msg)
            tmux("send-keys", "-t", "shot", "Enter" if msg != "p" else "p")
            time.sleep(0.5)
            wait(idle)
        time.sleep(0.5)
        render(tmux("capture-pane", "-e", "-p", "-t", "shot"), out)
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)
    print("tui_screenshot: wrote", out)


if __name__ == "__main__":
    main()
