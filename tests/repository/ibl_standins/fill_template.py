"""trtspec's stand-in for upstream's tools/fill_template.py, with the behaviour upstream documents.

`fill_template.py [-i] FILE "k1:v1,k2:v2"`: the list splits on commas, then each item on its colon
(a backslash escapes the next character in each split); every key must occur in the file (an assertion
otherwise); `${key}` is substituted with string.Template.safe_substitute, so a placeholder with no
value stays as it is; max_queue_size and max_queue_delay_microseconds default to 0
(reference/trtllm-triton-modelopt.md section 2.3). Written here from that description, not copied.
"""

import argparse
import string


def split(text, delimiter):
    parts, current, escaped = [], "", False
    for char in text:
        if escaped:
            current, escaped = current + char, False
        elif char == "\\":
            escaped = True
        elif char == delimiter:
            parts.append(current)
            current = ""
        else:
            current += char
    return parts + [current]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-i", "--in_place", action="store_true")
    parser.add_argument("file_path")
    parser.add_argument("substitutions")
    args = parser.parse_args()
    with open(args.file_path) as handle:
        template = string.Template(handle.read())
    values = {"max_queue_size": 0, "max_queue_delay_microseconds": 0}
    for item in split(args.substitutions, ","):
        key, value = split(item, ":")          # exactly one colon left after the comma split
        assert key in template.template, f"key '{key}' does not exist in the file {args.file_path}."
        values[key] = value
    text = template.safe_substitute(values)
    if args.in_place:
        with open(args.file_path, "w") as handle:
            handle.write(text)
    else:
        print(text)


if __name__ == "__main__":
    main()
