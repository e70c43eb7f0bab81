//! `--svg PATH`: two panels — latency by quantile for each strategy, and
//! cold loads per second around the largest membership change, staged and
//! not (plotters, SVG backend only).

use std::path::Path;

use plotters::prelude::*;

use crate::scenario::{ChurnRow, StrategyRow};

const COLORS: [RGBColor; 6] = [
    RGBColor(0x99, 0x99, 0x99),
    RGBColor(0xcc, 0x99, 0x33),
    RGBColor(0x33, 0x99, 0xcc),
    RGBColor(0x99, 0x33, 0x99),
    RGBColor(0x33, 0x99, 0x33),
    RGBColor(0xcc, 0x33, 0x33),
];

type Error = Box<dyn std::error::Error>;

pub fn write(path: &Path, strategies: &[StrategyRow], churn: &[ChurnRow]) -> Result<(), Error> {
    let root = SVGBackend::new(path, (1100, 440)).into_drawing_area();
    root.fill(&WHITE)?;
    let (left, right) = root.split_horizontally(560);
    latency(&left, strategies)?;
    cold_loads(&right, churn)?;
    root.present()?;
    Ok(())
}

fn latency<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[StrategyRow],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let Some(first) = rows.first() else {
        return Ok(());
    };
    let quantiles: Vec<f64> = first.curve.iter().map(|(q, _)| *q).collect();
    let top = rows
        .iter()
        .flat_map(|r| r.curve.iter().map(|(_, ms)| *ms))
        .fold(10.0f64, f64::max)
        * 1.5;
    let mut chart = ChartBuilder::on(area)
        .caption("modelled latency by quantile", ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(60)
        .build_cartesian_2d(0.0..(quantiles.len() - 1) as f64, (10.0..top).log_scale())?;
    chart
        .configure_mesh()
        .x_labels(quantiles.len())
        .x_label_formatter(&|x| {
            let i = x.round() as usize;
            quantiles
                .get(i)
                .map_or_else(String::new, |q| format!("p{}", q * 100.0))
        })
        .y_label_formatter(&|v| format!("{v:.0}"))
        .y_desc("ms (log)")
        .draw()?;
    for (i, row) in rows.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let points = row
            .curve
            .iter()
            .enumerate()
            .map(|(x, (_, ms))| (x as f64, ms.max(10.0)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(row.strategy)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

fn cold_loads<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    rows: &[ChurnRow],
) -> Result<(), Error>
where
    DB::ErrorType: 'static,
{
    let Some(pct) = rows.iter().map(|r| r.churn_pct).max() else {
        return Ok(());
    };
    let runs: Vec<&ChurnRow> = rows.iter().filter(|r| r.churn_pct == pct).collect();
    let len = runs.iter().map(|r| r.timeline.len()).max().unwrap_or(0);
    let top = runs
        .iter()
        .flat_map(|r| r.timeline.iter().copied())
        .max()
        .unwrap_or(1) as f64
        * 1.15;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("cold loads per second, {pct}% of backends join at t = 0"),
            ("sans-serif", 18),
        )
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(50)
        .build_cartesian_2d(-10.0..(len as f64 - 10.0), 0.0..top)?;
    chart
        .configure_mesh()
        .x_label_formatter(&|v| format!("{v:.0}"))
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_desc("seconds")
        .y_desc("loads / s")
        .draw()?;
    for run in runs {
        let (color, label) = match run.staged {
            true => (COLORS[4], "staged"),
            false => (COLORS[5], "all at once"),
        };
        let points = run
            .timeline
            .iter()
            .enumerate()
            .map(|(x, &n)| (x as f64 - 10.0, f64::from(n)));
        chart
            .draw_series(LineSeries::new(points, color.stroke_width(2)))?
            .label(label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
