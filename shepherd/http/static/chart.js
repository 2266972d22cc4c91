/* Small charts on a <canvas> for the dashboard's learning curves and training metrics: points, a line,
   axes with round ticks. No dependencies; colours come from the page's CSS variables. */
"use strict";

(function (global) {
  function cssColor(name, fallback) {
    const value = getComputedStyle(document.documentElement).getPropertyValue(name).trim();
    return value || fallback;
  }

  /* Round tick values covering [min, max], about `count` of them. */
  function ticks(min, max, count) {
    const span = max - min;
    const raw = span / Math.max(count, 1);
    const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
    const norm = raw / magnitude;
    const step = (norm < 1.5 ? 1 : norm < 3 ? 2 : norm < 7 ? 5 : 10) * magnitude;
    const first = Math.floor(min / step) * step;
    const values = [];
    for (let value = first; value <= max + step * 0.5; value += step) {
      values.push(Math.abs(value) < step * 1e-9 ? 0 : value);
    }
    return values;
  }

  function format(value) {
    const abs = Math.abs(value);
    const short = (scaled) => scaled.toFixed(1).replace(/\.0$/, "");
    if (abs >= 1e6) return short(value / 1e6) + "M";
    if (abs >= 1e3) return short(value / 1e3) + "k";
    if (abs >= 100 || Number.isInteger(value)) return String(Math.round(value));
    return value.toPrecision(3);
  }

  /* The mean of the last `window` values at each point. */
  function movingAverage(points, window) {
    const out = [];
    let sum = 0;
    for (let i = 0; i < points.length; i++) {
      sum += points[i][1];
      if (i >= window) sum -= points[i - window][1];
      out.push([points[i][0], sum / Math.min(i + 1, window)]);
    }
    return out;
  }

  /* One colour per client of an advised agent, in the order the clients are listed. */
  const CLIENT_COLORS = ["#2f6fdf", "#d9480f", "#2b8a3e", "#ae3ec9", "#0c8599", "#e8590c", "#5f3dc4", "#a61e4d"];
  function clientColor(index) { return CLIENT_COLORS[index % CLIENT_COLORS.length]; }

  /* `color` at opacity `alpha` (a #rrggbb colour). */
  function faded(color, alpha) {
    const n = parseInt(color.slice(1), 16);
    return `rgba(${(n >> 16) & 255},${(n >> 8) & 255},${n & 255},${alpha})`;
  }

  /* A dashed vertical line at each [x, name] of `lessons` where the agent's lesson changed, labelled with
     the lesson it changed to. */
  function lessonMarks(ctx, lessons, px, top, plotH, color) {
    ctx.save();
    ctx.strokeStyle = color;
    ctx.fillStyle = color;
    ctx.lineWidth = 1;
    ctx.setLineDash([4, 3]);
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    lessons.forEach(([x, name], i) => {
      const at = Math.round(px(x)) + 0.5;
      ctx.beginPath();
      ctx.moveTo(at, top);
      ctx.lineTo(at, top + plotH);
      ctx.stroke();
      ctx.fillText(name, at + 4, top + 2 + (i % 2) * 14);  // alternate rows: close marks stay legible
    });
    ctx.restore();
  }

  /* Draw series = {train, average, evaluation, deploy}, each a list of [x, y]; an advised agent's also
     has clients = [{name, train, average, evaluation, deploy}], each client drawn in its own colour
     against its own training steps (then the top-level lists are empty). series.lessons = [[x, name]]
     marks where the lesson changed (docs/lessons.md). */
  function drawCurve(canvas, series) {
    const ratio = global.devicePixelRatio || 1;
    const width = canvas.clientWidth || 800;
    const height = canvas.clientHeight || 360;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const ink = cssColor("--ink", "#1d2433");
    const muted = cssColor("--muted", "#5f6b7a");
    const line = cssColor("--line", "#d9dee5");
    ctx.font = "12px system-ui, sans-serif";

    const clients = series.clients || [];
    let all = [].concat(series.train, series.evaluation, series.deploy, series.average);
    for (const client of clients) all = all.concat(client.train, client.evaluation, client.deploy);
    if (!all.length) {
      ctx.fillStyle = muted;
      ctx.textAlign = "center";
      ctx.fillText("No finished episodes yet", width / 2, height / 2);
      return;
    }
    let xMax = 1;
    let yMin = Infinity;
    let yMax = -Infinity;
    for (const [x, y] of all) {
      xMax = Math.max(xMax, x);
      yMin = Math.min(yMin, y);
      yMax = Math.max(yMax, y);
    }
    if (yMin === yMax) { yMin -= 1; yMax += 1; }
    const yTicks = ticks(yMin, yMax, 5);
    const xTicks = ticks(0, xMax, 6);
    yMin = Math.min(yMin, yTicks[0]);
    yMax = Math.max(yMax, yTicks[yTicks.length - 1]);
    xMax = Math.max(xMax, xTicks[xTicks.length - 1]);

    const pad = { left: 58, right: 18, top: 14, bottom: 42 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const px = (x) => pad.left + (x / xMax) * plotW;
    const py = (y) => pad.top + (1 - (y - yMin) / (yMax - yMin)) * plotH;

    ctx.strokeStyle = line;
    ctx.lineWidth = 1;
    ctx.fillStyle = muted;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const y of yTicks) {
      if (y < yMin || y > yMax) continue;
      ctx.beginPath();
      ctx.moveTo(pad.left, Math.round(py(y)) + 0.5);
      ctx.lineTo(pad.left + plotW, Math.round(py(y)) + 0.5);
      ctx.stroke();
      ctx.fillText(format(y), pad.left - 8, py(y));
    }
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const x of xTicks) {
      if (x > xMax) continue;
      ctx.beginPath();
      ctx.moveTo(Math.round(px(x)) + 0.5, pad.top);
      ctx.lineTo(Math.round(px(x)) + 0.5, pad.top + plotH);
      ctx.stroke();
      ctx.fillText(format(x), px(x), pad.top + plotH + 6);
    }
    ctx.fillStyle = ink;
    ctx.fillText("training steps", pad.left + plotW / 2, height - 16);
    ctx.save();
    ctx.translate(14, pad.top + plotH / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.textBaseline = "middle";
    ctx.fillText("episode return", 0, 0);
    ctx.restore();

    const dots = (points, color, radius, outline) => {
      ctx.fillStyle = color;
      ctx.strokeStyle = "#fff";
      for (const [x, y] of points) {
        ctx.beginPath();
        ctx.arc(px(x), py(y), radius, 0, 2 * Math.PI);
        ctx.fill();
        if (outline) ctx.stroke();
      }
    };
    const polyline = (points, color) => {
      if (points.length < 2) return;
      ctx.strokeStyle = color;
      ctx.lineWidth = 2;
      ctx.lineJoin = "round";
      ctx.beginPath();
      points.forEach(([x, y], i) => (i ? ctx.lineTo(px(x), py(y)) : ctx.moveTo(px(x), py(y))));
      ctx.stroke();
    };
    lessonMarks(ctx, series.lessons || [], px, pad.top, plotH, muted);
    clients.forEach((client, i) => lessonMarks(ctx, client.lessons || [], px, pad.top, plotH, clientColor(i)));
    dots(series.train, cssColor("--train", "rgba(47,111,223,0.45)"), 2, false);
    dots(series.deploy, cssColor("--deploy", "#7a7a7a"), 2.5, false);
    clients.forEach((client, i) => {
      dots(client.train, faded(clientColor(i), 0.3), 2, false);
      dots(client.deploy, faded(clientColor(i), 0.6), 2.5, false);
    });
    polyline(series.average, cssColor("--average", "#0b3d91"));
    clients.forEach((client, i) => polyline(client.average, clientColor(i)));
    ctx.lineWidth = 1.5;
    dots(series.evaluation, cssColor("--evaluation", "#e07b00"), 4, true);
    clients.forEach((client, i) => { ctx.lineWidth = 1.5; dots(client.evaluation, clientColor(i), 4, true); });
  }

  /* A small line chart of one training metric: points = list of [x (training steps), y]. */
  function drawMetric(canvas, points) {
    const ratio = global.devicePixelRatio || 1;
    const width = canvas.clientWidth || 300;
    const height = canvas.clientHeight || 150;
    canvas.width = Math.round(width * ratio);
    canvas.height = Math.round(height * ratio);
    const ctx = canvas.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    const muted = cssColor("--muted", "#5f6b7a");
    ctx.font = "11px system-ui, sans-serif";
    if (!points.length) {
      ctx.fillStyle = muted;
      ctx.textAlign = "center";
      ctx.fillText("no values yet", width / 2, height / 2);
      return;
    }
    let xMin = Infinity, xMax = -Infinity, yMin = Infinity, yMax = -Infinity;
    for (const [x, y] of points) {
      xMin = Math.min(xMin, x); xMax = Math.max(xMax, x);
      yMin = Math.min(yMin, y); yMax = Math.max(yMax, y);
    }
    if (xMin === xMax) { xMin -= 1; xMax += 1; }
    if (yMin === yMax) { const d = Math.abs(yMin) * 0.1 || 1; yMin -= d; yMax += d; }
    const yTicks = ticks(yMin, yMax, 3).filter((y) => y >= yMin && y <= yMax);
    const pad = { left: 48, right: 10, top: 8, bottom: 20 };
    const plotW = width - pad.left - pad.right;
    const plotH = height - pad.top - pad.bottom;
    const px = (x) => pad.left + ((x - xMin) / (xMax - xMin)) * plotW;
    const py = (y) => pad.top + (1 - (y - yMin) / (yMax - yMin)) * plotH;
    ctx.strokeStyle = cssColor("--line", "#d9dee5");
    ctx.lineWidth = 1;
    ctx.fillStyle = muted;
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    for (const y of yTicks) {
      ctx.beginPath();
      ctx.moveTo(pad.left, Math.round(py(y)) + 0.5);
      ctx.lineTo(pad.left + plotW, Math.round(py(y)) + 0.5);
      ctx.stroke();
      ctx.fillText(format(y), pad.left - 6, py(y));
    }
    ctx.textAlign = "left";
    ctx.textBaseline = "top";
    ctx.fillText(format(xMin), pad.left, pad.top + plotH + 5);
    ctx.textAlign = "right";
    ctx.fillText(format(xMax) + " steps", pad.left + plotW, pad.top + plotH + 5);
    ctx.strokeStyle = cssColor("--average", "#0b3d91");
    ctx.lineWidth = 1.5;
    ctx.lineJoin = "round";
    ctx.beginPath();
    points.forEach(([x, y], i) => (i ? ctx.lineTo(px(x), py(y)) : ctx.moveTo(px(x), py(y))));
    ctx.stroke();
    if (points.length === 1) {
      ctx.fillStyle = cssColor("--average", "#0b3d91");
      ctx.beginPath();
      ctx.arc(px(points[0][0]), py(points[0][1]), 2.5, 0, 2 * Math.PI);
      ctx.fill();
    }
  }

  global.ShepherdChart = { drawCurve, drawMetric, movingAverage, ticks, clientColor };
})(window);
