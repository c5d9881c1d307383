"""Which of distributed's tests fail with the switch on, off, or both
(junit-on.xml and junit-off.xml in the directory given)."""

import sys
import xml.etree.ElementTree as ET
from collections import Counter

WORK = sys.argv[1]


def load(mode):
    root = ET.parse(f"{WORK}/junit-{mode}.xml").getroot()
    out = {}
    for tc in root.iter("testcase"):
        name = f"{tc.get('classname')}::{tc.get('name')}"
        status = "passed"
        for child in tc:
            if child.tag in ("failure", "error"):
                status = child.tag
            elif child.tag == "skipped":
                status = "skipped" if status == "passed" else status
        out[name] = status
    return out


on, off = load("on"), load("off")
for mode, d in (("on", on), ("off", off)):
    print(mode, dict(Counter(d.values())), "total", len(d))
bad_on = {k for k, v in on.items() if v in ("failure", "error")}
bad_off = {k for k, v in off.items() if v in ("failure", "error")}
print("failing in both:", sorted(bad_on & bad_off))
print("failing only with the switch on:", sorted(bad_on - bad_off))
print("failing only with the switch off:", sorted(bad_off - bad_on))
