#!/usr/bin/env python3
"""`kvad tui` driven in a real terminal: tmux runs the real binary, the test
sends keys and reads the screen back (capture-pane -p).

Usage: test_tui.py KVAD_BINARY. Exits 77 (skipped) when tmux is missing;
the HF-checkpoint case skips itself when the HF cache lacks SmolLM2.
Waits are bounds on how long to look for a screen, never timing checks.
"""
import os
import re
import shlex
import shutil
import subprocess
import sys
import unittest

KVAD = None
SOCKET = "kvad-tui-test-%d" % os.getpid()
HOME = os.environ.get("KVAD_HOME", os.path.expanduser("~/.cache/kvad"))
HF_CACHE = os.environ.get("HF_HUB_CACHE", os.path.join(HOME, "hf-cache"))
HF_REPO = "HuggingFaceTB/SmolLM2-135M-Instruct"


def tmux(*args):
    r = subprocess.run(["tmux", "-L", SOCKET, *args], capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError("tmux %s: %s" % (" ".join(args[:2]), r.stderr.strip()))
    return r.stdout


class Pane:
    """One tmux session running `kvad tui ARGS` under a shell that reports,
    after kvad exits, its status and whether the terminal's settings are
    what they were before."""

    count = 0

    def __init__(self, args, env=None, x=120, y=40):
        Pane.count += 1
        self.name = "t%d" % Pane.count
        envs = " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in (env or {}).items())
        cmd = ("before=$(stty -g); env %s %s tui %s; rc=$?; after=$(stty -g); "
               '[ "$before" = "$after" ] && echo TTY_RESTORED; echo KVAD_EXIT=$rc; sleep 600'
               % (envs, shlex.quote(KVAD), " ".join(shlex.quote(a) for a in args)))
        tmux("new-session", "-d", "-x", str(x), "-y", str(y), "-s", self.name, "sh", "-c", cmd)

    def screen(self):
        return tmux("capture-pane", "-p", "-t", self.name)

    def keys(self, *k):
        tmux("send-keys", "-t", self.name, *k)

    def type(self, text):
        tmux("send-keys", "-t", self.name, "-l", text)

    def wait(self, pred, what, bound=120):
        """Polls the screen until pred(screen) holds; fails showing the screen."""
        import time
        end = time.monotonic() + bound
        s = ""
        while time.monotonic() < end:
            s = self.screen()
            if pred(s):
                return s
            time.sleep(0.2)
        raise AssertionError("no screen with %s within %d s; the screen:\n%s" % (what, bound, s))

    def close(self):
        subprocess.run(["tmux", "-L", SOCKET, "kill-session", "-t", self.name], capture_output=True)


def figure(screen, name):
    """The figures panel's value for `name` ("decode" -> "62.4 tok/s (40 tok)"), or None."""
    # The panel's border is a line-drawing character; captured from a vt100
    # (an alternate character set) it reads as "x".
    m = re.search(r"^.*[\u2502x|]%s +(\S.*?)\s*$" % re.escape(name), screen, re.M)
    return m.group(1) if m else None


def rate(screen, name):
    v = figure(screen, name)
    m = re.match(r"([0-9.]+) tok/s", v or "")
    return float(m.group(1)) if m else 0.0


def idle(s):
    return "keys>" in s and "(Esc stops)" not in s and "loading" not in s


def ready(s):
    return idle(s) and figure(s, "form") is not None


class TuiTest(unittest.TestCase):
    def start(self, args, **kw):
        p = Pane(["--temp", "0", *([] if "-n" in args else ["-n", "16"]), *args], **kw)
        self.addCleanup(p.close)
        return p

    def send(self, p, text):
        p.type(text)
        p.keys("Enter")

    def quit_and_check(self, p, alt_screen=True):
        p.keys("q")
        s = p.wait(lambda s: "KVAD_EXIT=" in s, "kvad's exit status")
        self.assertIn("KVAD_EXIT=0", s)
        self.assertIn("TTY_RESTORED", s)
        if alt_screen:  # (a vt100 has no alternate screen to leave)
            self.assertNotIn("keys>", s)  # the screen is the shell's again

    def test_gguf_two_turns_p_resize_quit(self):
        p = self.start([], env={"LANG": "C.UTF-8"})
        s = p.wait(ready, "the TUI ready")
        self.assertEqual(figure(s, "form"), "cpu as stored")
        self.assertIn("gpu q8_0", s)  # every form is listed, the ones that cannot run greyed with why
        self.send(p, "What is the capital of France?")
        s = p.wait(lambda s: idle(s) and rate(s, "decode") > 0, "the first reply's decode speed")
        self.assertIn("What is the capital of France?", s)
        self.assertEqual(figure(s, "cached_tokens"), "0")
        self.send(p, "And of Italy?")
        s = p.wait(lambda s: idle(s) and "And of Italy?" in s and (figure(s, "cached_tokens") or "0") not in ("0", "-"),
                   "cached_tokens > 0 after the second turn")
        self.assertGreater(int(figure(s, "cached_tokens")), 0)
        self.assertGreater(rate(s, "decode"), 0)
        self.assertRegex(figure(s, "context"), r"^[1-9][0-9]* / [0-9]+ tokens$")
        # The default model is a GGUF: p switches it to cpu q8_0 through the
        # quantize-once cache (dequantized, requantized), keeps the
        # conversation, and the model answers in the new form.
        p.keys("p")
        s = p.wait(lambda s: idle(s) and "switched to cpu q8_0" in s, "the switch to q8_0", bound=300)
        self.assertEqual(figure(s, "form"), "cpu q8_0")
        self.assertTrue(figure(s, "backend").startswith("cpu | q8_0"), figure(s, "backend"))
        self.assertIn("And of Italy?", s)
        self.assertRegex(s, r"re-prefilled [1-9][0-9]* tokens")
        self.assertNotIn("a GGUF runs on the", s)  # the CPU forms are not greyed
        self.send(p, "And of Spain?")
        s = p.wait(lambda s: idle(s) and "And of Spain?" in s and re.search(r"cpu q8_0 +[0-9.]+ +[0-9.]+", s),
                   "a reply on q8_0")
        self.assertGreater(rate(s, "decode"), 0)
        self.assertRegex(s, r"cpu as stored +[0-9.]+ +[0-9.]+")  # the stored form's speed stays in the table
        # Narrow: the panel gives way to one line of figures; wide again: back.
        tmux("resize-window", "-t", p.name, "-x", "80", "-y", "24")
        s = p.wait(lambda s: re.search(r"cached_tokens [1-9][0-9]* \| ctx [0-9]+/", s), "the narrow layout")
        self.assertIn("q quit", s)
        self.assertTrue(all(len(line) <= 80 for line in s.splitlines()))
        tmux("resize-window", "-t", p.name, "-x", "120", "-y", "40")
        s = p.wait(lambda s: figure(s, "cached_tokens") is not None, "the figures panel again")
        self.assertIn("And of Spain?", s)
        self.quit_and_check(p)

    def test_speculation_shows_its_acceptance(self):
        # n-gram lookup over a reply that repeats the prompt: the panel shows
        # the proposer and how many of its draft tokens were accepted.
        p = self.start(["--spec-ngram", "3", "-n", "40"])
        s = p.wait(ready, "the TUI ready")
        self.assertEqual(figure(s, "speculation"), "ngram 3: -")
        self.send(p, "Repeat this line exactly, twice: the red fox jumps over the lazy brown dog.")
        s = p.wait(lambda s: idle(s) and re.match(r"ngram 3: [0-9]+/[0-9]+ accepted", figure(s, "speculation") or ""),
                   "the acceptance of the first reply")
        m = re.match(r"ngram 3: ([0-9]+)/([0-9]+) accepted \(([0-9]+)%\)", figure(s, "speculation"))
        self.assertIsNotNone(m, figure(s, "speculation"))
        print("speculation figure:", figure(s, "speculation"))
        accepted, proposed = int(m.group(1)), int(m.group(2))
        self.assertGreater(proposed, 0)
        self.assertLessEqual(accepted, proposed)
        self.assertGreater(rate(s, "decode"), 0)
        self.quit_and_check(p)

    def test_hf_checkpoint_p_switches_to_q8_0(self):
        if not os.path.isdir(os.path.join(HF_CACHE, "models--" + HF_REPO.replace("/", "--"), "snapshots")):
            self.skipTest("%s is not in the HF cache %s" % (HF_REPO, HF_CACHE))
        p = self.start(["-m", HF_REPO], env={"LANG": "C.UTF-8", "HF_HUB_CACHE": HF_CACHE, "HF_HUB_OFFLINE": "1"})
        s = p.wait(ready, "the TUI ready")
        self.assertEqual(figure(s, "form"), "cpu as stored")
        self.assertTrue(figure(s, "backend").startswith("cpu | bf16"), figure(s, "backend"))
        self.send(p, "Hi there")
        p.wait(lambda s: idle(s) and rate(s, "decode") > 0, "the first reply")
        p.keys("p")
        s = p.wait(lambda s: idle(s) and "switched to cpu q8_0" in s, "the switch to q8_0")
        self.assertEqual(figure(s, "form"), "cpu q8_0")
        self.assertTrue(figure(s, "backend").startswith("cpu | q8_0"), figure(s, "backend"))
        self.assertIn("Hi there", s)  # the conversation is kept ...
        self.assertRegex(s, r"re-prefilled [1-9][0-9]* tokens")  # ... and evaluated on the new form
        # The table keeps the bf16 form's last reply speed beside the new one.
        self.assertRegex(s, r"cpu as stored +[0-9.]+ +[0-9.]+")
        self.send(p, "Thanks!")
        s = p.wait(lambda s: idle(s) and "Thanks!" in s and (figure(s, "cached_tokens") or "-") not in ("0", "-"),
                   "a reply on q8_0 that reuses the re-prefilled conversation")
        self.assertRegex(s, r"cpu q8_0 +[0-9.]+ +[0-9.]+")
        self.quit_and_check(p)

    def test_hf_form_that_cannot_load(self):
        # The quantize-once cache cannot be made under /proc: q8_0 fails to
        # load, says why in the UI, stays greyed, and bf16 keeps running.
        if not os.path.isdir(os.path.join(HF_CACHE, "models--" + HF_REPO.replace("/", "--"), "snapshots")):
            self.skipTest("%s is not in the HF cache %s" % (HF_REPO, HF_CACHE))
        p = self.start(["-m", HF_REPO], env={"LANG": "C.UTF-8", "HF_HUB_CACHE": HF_CACHE, "HF_HUB_OFFLINE": "1",
                                             "KVAD_HOME": "/proc/kvad-tui-test-nowhere"})
        p.wait(ready, "the TUI ready")
        p.keys("p")
        s = p.wait(lambda s: idle(s) and "error: cannot switch to cpu q8_0" in s, "the load error")
        self.assertIn("cpu q8_0: failed to load", s)
        self.assertEqual(figure(s, "form"), "cpu as stored")
        self.send(p, "Hi")
        s = p.wait(lambda s: idle(s) and rate(s, "decode") > 0, "a reply on the form still loaded")
        self.quit_and_check(p)

    def test_no_colour_bad_input_esc_system_reset(self):
        # vt100 has no colours (NO_COLOR too), the C locale no UTF-8, and a
        # 256-token context that a long message cannot fit.
        p = self.start(["-c", "256", "-n", "-1"], env={"TERM": "vt100", "NO_COLOR": "1", "LANG": "C", "LC_ALL": "C"})
        s = p.wait(ready, "the TUI ready")
        # Esc stops a reply that would run to the end of the context.
        self.send(p, "Count from 1 to 500, one number per line.")
        p.wait(lambda s: "(Esc stops)" in s and re.search(r"decode +[0-9.]+ tok/s", s), "a reply streaming")
        p.keys("Escape")
        s = p.wait(lambda s: "reply stopped (Esc)" in s, "the reply stopped")
        self.assertTrue(idle(s))
        self.send(p, "word " * 300)
        s = p.wait(lambda s: "error:" in s, "the error for a message longer than the context")
        self.assertIn("does not fit the context", s)
        # Still running: a system prompt, then a reset.
        p.keys("Escape")
        p.keys("s")
        p.wait(lambda s: "system>" in s, "the system prompt line")
        p.type("You are terse.")
        p.keys("Enter")
        s = p.wait(lambda s: "system prompt set" in s, "the system prompt set")
        self.assertIn("system: You are terse.", s)
        p.keys("r")
        s = p.wait(lambda s: "conversation cleared" in s, "the reset")
        # History: Up in the message line brings back the last message sent.
        p.keys("i")
        p.keys("Up")
        p.wait(lambda s: re.search(r"^> .*word word", s, re.M), "the last message from the history")
        p.keys("C-u")
        p.keys("Escape")
        s = p.wait(lambda s: "keys> type a message" in s, "the keys line again")
        self.assertIn("system: You are terse.", s)  # a reset keeps the system prompt
        self.quit_and_check(p, alt_screen=False)

    def test_not_a_terminal(self):
        r = subprocess.run([KVAD, "tui"], stdin=subprocess.DEVNULL, capture_output=True, text=True)
        self.assertEqual(r.returncode, 1)
        self.assertIn("kvad: error: kvad tui needs a terminal", r.stderr)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: test_tui.py KVAD_BINARY")
    KVAD = os.path.abspath(sys.argv.pop(1))
    if not shutil.which("tmux"):
        print("skipped: tmux is not installed")
        sys.exit(77)
    # One session lives for the whole run, so that the tmux server does not
    # exit (and race the next new-session) when a test's session closes.
    tmux("new-session", "-d", "-s", "keeper", "sleep 3600")
    try:
        result = unittest.main(exit=False, verbosity=2).result
    finally:
        subprocess.run(["tmux", "-L", SOCKET, "kill-server"], capture_output=True)
    sys.exit(0 if result.wasSuccessful() else 1)
