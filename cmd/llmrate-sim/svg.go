package main

import (
	"fmt"
	"math"
	"strings"
)

// rebin averages per-second values over bins of width seconds.
func rebin(v []float64, width int) []float64 {
	out := make([]float64, (len(v)+width-1)/width)
	for i, x := range v {
		out[i/width] += x / float64(width)
	}
	return out
}

// SVG draws two panels, requests/s and tokens/s: offered (dashed grey),
// admitted (blue) and the tier's sustained figure (dotted), averaged over
// bins of a few seconds so a 100-per-minute rate reads as 1.67/s. With
// model limits a third panel shows admitted requests/s per model limit,
// each with its own sustained figure.
func (r *Result) SVG() string {
	const w, panelH, pad = 760, 220, 50
	var b strings.Builder
	h := 2*panelH + 3*pad
	if len(r.PerModel) > 0 {
		h += panelH + pad + 60
	}
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14">%s</text>`+"\n", pad, escape(r.Title))
	width := max(1, (r.Seconds+59)/60)
	panel := func(top int, title string, offered, admitted []float64, sustained float64) {
		offered, admitted = rebin(offered, width), rebin(admitted, width)
		maxY := sustained * 1.2
		for _, v := range offered {
			maxY = math.Max(maxY, v)
		}
		maxY = niceCeil(maxY)
		x0, y0, pw := pad, top+panelH, w-2*pad
		fmt.Fprintf(&b, `<text x="%d" y="%d">%s</text>`+"\n", x0, top-8, escape(title))
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, x0+pw, y0)
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top, x0, y0)
		for i := 0; i <= 4; i++ {
			y := y0 - i*panelH/4
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-4, y+4, trim(maxY*float64(i)/4))
			fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`+"\n", x0+1, y, x0+pw, y)
		}
		n := len(offered)
		for i := 0; i <= 6 && n > 0; i++ {
			bin := i * n / 6
			x := x0 + pw*bin/max(n, 1)
			fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="middle">%ds</text>`+"\n", x, y0+16, bin*width)
		}
		ys := float64(y0) - float64(panelH)*sustained/maxY
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#d29922" stroke-dasharray="2,3"/>`+"\n", x0, ys, x0+pw, ys)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" fill="#d29922" text-anchor="end">sustained figure</text>`+"\n", x0+pw, ys-4)
		line := func(vals []float64, color string, width float64, dash string) {
			var pts []string
			for i, v := range vals {
				x := float64(x0) + float64(pw)*(float64(i)+0.5)/float64(max(n, 1))
				y := float64(y0) - float64(panelH)*v/maxY
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
			}
			fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%.1f" stroke-dasharray="%s" points="%s"/>`+"\n", color, width, dash, strings.Join(pts, " "))
		}
		line(admitted, "#1f6feb", 2.5, "none")
		line(offered, "#666", 1.5, "6,4")
	}
	panel(pad+20, fmt.Sprintf("requests per second (%ds averages)", width), r.OfferedRPS, r.AdmittedRPS, float64(r.Limits.RequestsPerMinute)/60)
	panel(2*pad+panelH+20, fmt.Sprintf("tokens per second (%ds averages)", width), r.OfferedTPS, r.AdmittedTPS, float64(r.Limits.TokensPerMinute)/60)
	fmt.Fprintf(&b, `<text x="%d" y="%d" fill="#666">offered</text><text x="%d" y="%d" fill="#1f6feb">admitted</text>`+"\n", w-170, 20, w-100, 20)
	if len(r.PerModel) > 0 {
		r.modelPanel(&b, 3*pad+2*panelH+40, w, panelH, pad, width)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func trim(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.3gM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.3gk", v/1e3)
	}
	return fmt.Sprintf("%.3g", v)
}

func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

var modelColors = []string{"#1f6feb", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#0a3069", "#a40e26", "#116329"}

// modelPanel draws admitted requests/s per model limit (solid) and each
// limit's sustained figure (dotted, same colour), with a legend.
func (r *Result) modelPanel(b *strings.Builder, top, w, panelH, pad, width int) {
	names := sortedKeys(r.PerModel)
	maxY := 0.0
	series := make([][]float64, len(names))
	for i, name := range names {
		st := r.PerModel[name]
		series[i] = rebin(st.AdmittedRPS, width)
		maxY = math.Max(maxY, float64(st.Limits.RequestsPerMinute)/60*1.2)
		for _, v := range series[i] {
			maxY = math.Max(maxY, v)
		}
	}
	maxY = niceCeil(math.Max(maxY, 0.1))
	x0, y0, pw := pad, top+panelH, w-2*pad
	fmt.Fprintf(b, `<text x="%d" y="%d">admitted requests per second by model limit (%ds averages; dotted: sustained figure)</text>`+"\n", x0, top-8, width)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, y0, x0+pw, y0)
	fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", x0, top, x0, y0)
	for i := 0; i <= 4; i++ {
		y := y0 - i*panelH/4
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", x0-4, y+4, trim(maxY*float64(i)/4))
		fmt.Fprintf(b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#eee"/>`+"\n", x0+1, y, x0+pw, y)
	}
	for i, name := range names {
		color := modelColors[i%len(modelColors)]
		st := r.PerModel[name]
		ys := float64(y0) - float64(panelH)*float64(st.Limits.RequestsPerMinute)/60/maxY
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="%s" stroke-dasharray="2,3"/>`+"\n", x0, ys, x0+pw, ys, color)
		var pts []string
		n := len(series[i])
		for j, v := range series[i] {
			x := float64(x0) + float64(pw)*(float64(j)+0.5)/float64(max(n, 1))
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, float64(y0)-float64(panelH)*v/maxY))
		}
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", color, strings.Join(pts, " "))
		fmt.Fprintf(b, `<text x="%d" y="%d" fill="%s">%s: %d of %d admitted</text>`+"\n", x0+8+(i%3)*220, y0+20+(i/3)*16, color,
			escape(name), st.Admitted, st.Offered)
	}
}
