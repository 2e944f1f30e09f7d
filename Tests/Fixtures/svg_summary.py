#!/usr/bin/env python3
"""Reads the soak report's SVG figures with Python's own XML parser and prints what the tests check, as JSON.

Usage: svg_summary.py FILE...  -> {"FILE": {...}, ...}; exits 1 naming the file that is not a well-formed SVG
document (the parse error), or whose drawing leaves the picture.

Per file: the SVG version, the title, each series (its <title> and the points its polylines and circles draw), the
tick labels, the axis labels, the subtitle, and how many warm-up and wind-down shades, restart, fault and
memory-pressure markers, lines of best fit and median-per-minute steps it holds.
"""

import json
import sys
import xml.etree.ElementTree as ElementTree

SVG = "{http://www.w3.org/2000/svg}"


def classes(element):
    return (element.get("class") or "").split()


def count(root, tag, *wanted):
    return sum(1 for element in root.iter(SVG + tag) if all(name in classes(element) for name in wanted))


def summarize(path):
    root = ElementTree.parse(path).getroot()
    if root.tag != SVG + "svg":
        raise ValueError(f"the root element is {root.tag}, not svg")
    width, height = float(root.get("width")), float(root.get("height"))

    def inside(x, y):
        if not (0 <= float(x) <= width and 0 <= float(y) <= height):
            raise ValueError(f"a point at {x},{y} lies outside the {width}x{height} picture")

    series = []
    for group in root.iter(SVG + "g"):
        if "series" not in classes(group):
            continue
        points = 0
        for element in group:
            if element.tag == SVG + "polyline":
                pairs = element.get("points").split()
                for pair in pairs:
                    inside(*pair.split(","))
                points += len(pairs)
            elif element.tag == SVG + "circle":
                inside(element.get("cx"), element.get("cy"))
                points += 1
        title = group.find(SVG + "title")
        series.append({"name": title.text if title is not None else None, "points": points})
    texts = [(classes(text), "".join(text.itertext())) for text in root.iter(SVG + "text")]
    return {
        "version": root.get("version"),
        "title": root.find(SVG + "title").text,
        "series": series,
        "ticks": [text for names, text in texts if "tick" in names],
        "axisLabels": [text for names, text in texts if "axis-label" in names],
        "subtitle": next((text for names, text in texts if "subtitle" in names), None),
        "warmUps": count(root, "rect", "shade", "warm-up"),
        "windDowns": count(root, "rect", "shade", "wind-down"),
        "restartMarkers": count(root, "line", "marker", "restart"),
        "faultMarkers": count(root, "line", "marker", "fault"),
        "pressureMarkers": count(root, "line", "marker", "pressure"),
        "fits": count(root, "line", "fit"),
        "medianSteps": count(root, "polyline", "median-per-minute"),
    }


def main():
    summaries = {}
    for path in sys.argv[1:]:
        try:
            summaries[path] = summarize(path)
        except (ElementTree.ParseError, ValueError, TypeError, AttributeError) as error:
            print(f"{path}: {error}", file=sys.stderr)
            sys.exit(1)
    print(json.dumps(summaries))


if __name__ == "__main__":
    main()
