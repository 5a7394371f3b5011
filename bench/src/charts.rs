//! SVG charts with plotters: throughput versus threads and connections, latency percentiles,
//! memory over a soak.

use crate::model::Run;
use crate::soak::Soak;
use anyhow::{Result, anyhow};
use plotters::prelude::*;
use std::path::Path;

const COLORS: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];

/// One named series of (x, y) points.
type Series = (String, Vec<(f64, f64)>);

/// One number of a soak sample.
type SampleValue = fn(&crate::soak::Sample) -> f64;

/// The series of `group` whose parameters are `prefix=N`, x = N, y = median / `scale`.
fn series(run: &Run, group: &str, prefix: &str, scale: f64) -> Vec<Series> {
    let mut out: Vec<Series> = Vec::new();
    for m in run.measurements.iter().filter(|m| m.group == group) {
        let Some(x) = m
            .parameter
            .strip_prefix(prefix)
            .and_then(|x| x.parse::<f64>().ok())
        else {
            continue;
        };
        match out.iter_mut().find(|(name, _)| *name == m.subject) {
            Some((_, points)) => points.push((x, m.median / scale)),
            None => out.push((m.subject.clone(), vec![(x, m.median / scale)])),
        }
    }
    for (_, points) in &mut out {
        points.sort_by(|a, b| a.0.total_cmp(&b.0));
    }
    out
}

/// A line chart with a logarithmic x axis.
fn line_chart(path: &Path, title: &str, x_desc: &str, y_desc: &str, data: &[Series]) -> Result<()> {
    let xs = data.iter().flat_map(|(_, p)| p.iter().map(|q| q.0));
    let x_max = xs.clone().fold(1.0_f64, f64::max) * 1.25;
    let x_min = xs.fold(f64::INFINITY, f64::min).min(1.0) * 0.8;
    let y_max = data
        .iter()
        .flat_map(|(_, p)| p.iter().map(|q| q.1))
        .filter(|v| v.is_finite())
        .fold(0.0_f64, f64::max)
        * 1.15;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d((x_min..x_max).log_scale(), 0.0..y_max.max(1.0))
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (i, (name, points)) in data.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(
                points.iter().copied(),
                color.stroke_width(2),
            ))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name.as_str())
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
            });
        chart
            .draw_series(points.iter().map(|&p| Circle::new(p, 4, color.filled())))
            .map_err(|e| anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

pub fn lib_threads(run: &Run, path: &Path) -> Result<()> {
    let data = series(run, "lib-throughput", "threads=", 1e6);
    line_chart(
        path,
        "In-process generators: IDs/s versus threads (one shared generator)",
        "threads",
        "million IDs/s",
        &data,
    )
}

pub fn connections(run: &Run, path: &Path) -> Result<()> {
    let data = series(run, "connections", "c=", 1e3);
    line_chart(
        path,
        "Single IDs over the network versus connections",
        "connections",
        "thousand IDs/s",
        &data,
    )
}

/// Bars of the HTTP latency percentiles at half of peak.
pub fn latency(run: &Run, path: &Path) -> Result<()> {
    // Two series, closed loop and fixed rate, over the union of their percentiles.
    let series: [(&str, &str); 2] = [
        ("latency-closed", "closed loop (wrk, few connections)"),
        (
            "latency",
            "fixed rate, 50 connections (snowflake bench --rate)",
        ),
    ];
    let mut labels: Vec<String> = Vec::new();
    for (group, _) in series {
        for m in run.measurements.iter().filter(|m| m.group == group) {
            if !labels.contains(&m.parameter) {
                labels.push(m.parameter.clone());
            }
        }
    }
    let order = ["p50", "p75", "p90", "p99", "p99.9", "max"];
    labels.sort_by_key(|l| order.iter().position(|o| o == l).unwrap_or(order.len()));
    let value = |group: &str, label: &str| {
        run.measurements
            .iter()
            .find(|m| m.group == group && m.parameter == label)
            .map(|m| m.median)
            .filter(|v| v.is_finite())
    };
    let bars: Vec<(&str, Vec<Option<f64>>)> = series
        .iter()
        .map(|(group, name)| (*name, labels.iter().map(|l| value(group, l)).collect()))
        .collect();
    grouped_bars(
        path,
        "snowflake HTTP /v1/id latency at half of peak",
        "µs",
        &labels,
        &bars,
    )
}

/// Bars of our RESP port against redis-server and the zero-work RESP server, the same client
/// (redis-benchmark), without and with pipelining.
pub fn resp(run: &Run, path: &Path) -> Result<()> {
    use crate::service::{RESP_GROUP, RESP_OURS, RESP_REDIS};
    let params = ["c=50", "c=50 -P 16"];
    let labels: Vec<String> = vec![
        "INCR, 50 connections".into(),
        "INCR, 50 connections, -P 16".into(),
    ];
    let bars: Vec<(&str, Vec<Option<f64>>)> = [
        (RESP_OURS, "snowflake --resp-addr"),
        (RESP_REDIS, "redis-server"),
        (crate::ceiling::RESP, "zero-work RESP server (C)"),
    ]
    .iter()
    .map(|(subject, name)| {
        let values = params
            .iter()
            .map(|p| {
                run.median(RESP_GROUP, subject, p)
                    .filter(|v| v.is_finite())
                    .map(|v| v / 1e3)
            })
            .collect();
        (*name, values)
    })
    .collect();
    grouped_bars(
        path,
        "Redis clients: INCR against our RESP port, redis-server and a zero-work server (redis-benchmark)",
        "thousand requests/s",
        &labels,
        &bars,
    )
}

/// Bars grouped by label, one colour per series; a missing value leaves a gap.
fn grouped_bars(
    path: &Path,
    caption: &str,
    y_desc: &str,
    labels: &[String],
    series: &[(&str, Vec<Option<f64>>)],
) -> Result<()> {
    let y_max = series
        .iter()
        .flat_map(|(_, values)| values.iter().flatten().copied())
        .fold(1.0_f64, f64::max)
        * 1.15;
    let n = labels.len().max(1);
    let width = 0.8 / series.len().max(1) as f64;
    let root = SVGBackend::new(path, (800, 480)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let mut chart = ChartBuilder::on(&root)
        .caption(caption, ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..n as f64, 0.0..y_max)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(n * 2 + 1)
        .x_label_formatter(&|x| {
            let i = x.floor() as usize;
            if (x - x.floor() - 0.5).abs() < 0.01 {
                labels.get(i).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .y_desc(y_desc)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (k, (name, values)) in series.iter().enumerate() {
        let left = 0.1 + width * k as f64;
        let bars: Vec<(usize, f64)> = values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (i, v)))
            .collect();
        if bars.is_empty() {
            continue;
        }
        let color = COLORS[k % COLORS.len()];
        chart
            .draw_series(bars.iter().map(|&(i, v)| {
                Rectangle::new(
                    [(i as f64 + left, 0.0), (i as f64 + left + width * 0.95, v)],
                    color.filled(),
                )
            }))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(*name)
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().map(|&(i, v)| {
                Text::new(
                    format!("{v:.0}"),
                    (i as f64 + left, v * 1.02 + y_max * 0.03),
                    ("sans-serif", 12),
                )
            }))
            .map_err(|e| anyhow!("{e:?}"))?;
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperLeft)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

/// Two panels over the minutes of a soak: VmRSS (after every chunk, highest under load, idle)
/// above, each chunk's requests/s by protocol below.
pub fn soak(soak: &Soak, path: &Path) -> Result<()> {
    let minutes = |s: f64| s / 60.0;
    let mib = |k: f64| k / 1024.0;
    let x_max = soak
        .samples
        .iter()
        .map(|s| minutes(s.elapsed_secs))
        .fold(0.0_f64, f64::max)
        .max(0.01)
        * 1.02;
    let rss_max = soak
        .samples
        .iter()
        .map(|s| s.rss_kib.max(s.rss_under_load_kib))
        .chain([soak.idle_rss_kib, soak.peak_rss_kib])
        .fold(1.0_f64, f64::max);
    let rps_max = soak
        .samples
        .iter()
        .map(|s| s.requests_per_sec / 1e3)
        .fold(1.0_f64, f64::max);
    let root = SVGBackend::new(path, (800, 600)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| anyhow!("{e:?}"))?;
    let root = root
        .titled(
            &format!(
                "snowflake serve over {} min of full load ({} connections)",
                soak.minutes, soak.connections
            ),
            ("sans-serif", 20),
        )
        .map_err(|e| anyhow!("{e:?}"))?;
    let (top, bottom) = root.split_vertically(330);

    let mut chart = ChartBuilder::on(&top)
        .margin(12)
        .x_label_area_size(30)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..mib(rss_max) * 1.25)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .y_desc("VmRSS, MiB")
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    let idle = mib(soak.idle_rss_kib);
    let grey = RGBColor(100, 100, 100);
    chart
        .draw_series(DashedLineSeries::new(
            [(0.0, idle), (x_max, idle)],
            6,
            4,
            grey.stroke_width(2),
        ))
        .map_err(|e| anyhow!("{e:?}"))?
        .label("idle, before the load")
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2)));
    let rss_lines: [(&str, RGBColor, u32, SampleValue); 2] = [
        (
            "highest while a chunk ran (every 250 ms)",
            COLORS[4],
            4,
            |s| s.rss_under_load_kib,
        ),
        ("after each chunk", COLORS[0], 2, |s| s.rss_kib),
    ];
    for (name, color, width, value) in rss_lines {
        let points: Vec<(f64, f64)> = soak
            .samples
            .iter()
            .map(|s| (minutes(s.elapsed_secs), mib(value(s))))
            .collect();
        let style = if width > 2 {
            color.mix(0.5).stroke_width(width)
        } else {
            color.stroke_width(width)
        };
        chart
            .draw_series(LineSeries::new(points, style))
            .map_err(|e| anyhow!("{e:?}"))?
            .label(name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::LowerRight)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;

    let mut chart = ChartBuilder::on(&bottom)
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..x_max, 0.0..rps_max * 1.7)
        .map_err(|e| anyhow!("{e:?}"))?;
    chart
        .configure_mesh()
        .x_desc("minutes of load")
        .y_desc("thousand requests/s")
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    for (i, (protocol, tool)) in [
        ("http", "HTTP /v1/id (wrk)"),
        ("grpc", "gRPC NextId (snowflake bench)"),
        ("thrift", "Thrift get_id (snowflake bench)"),
    ]
    .into_iter()
    .enumerate()
    {
        let color = COLORS[i + 1];
        let points: Vec<(f64, f64)> = soak
            .of(protocol)
            .map(|s| (minutes(s.elapsed_secs), s.requests_per_sec / 1e3))
            .collect();
        if points.is_empty() {
            continue;
        }
        chart
            .draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )
            .map_err(|e| anyhow!("{e:?}"))?
            .label(format!("requests/s, {tool}"))
            .legend(move |(x, y)| Circle::new((x + 10, y), 3, color.filled()));
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .position(SeriesLabelPosition::UpperRight)
        .draw()
        .map_err(|e| anyhow!("{e:?}"))?;
    root.present().map_err(|e| anyhow!("{e:?}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::soak::tests::sample;

    #[test]
    fn soak_chart_is_an_svg() {
        let soak = Soak {
            minutes: 0.1,
            connections: 50,
            idle_rss_kib: 8_000.0,
            peak_rss_kib: 9_500.0,
            samples: vec![
                sample(1.0, "http", 90_000.0, 9_000.0),
                sample(2.0, "grpc", 35_000.0, 9_200.0),
                sample(3.0, "thrift", 110_000.0, 9_300.0),
                sample(4.0, "http", 95_000.0, 9_300.0),
            ],
            ..Soak::default()
        };
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("soak-rss.svg");
        super::soak(&soak, &path).unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg"), "{}", &svg[..svg.len().min(200)]);
        assert!(svg.contains("requests/s, Thrift get_id (snowflake bench)"));
    }
}
